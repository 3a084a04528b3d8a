// Copies the node/credential icons next to the compiled files (n8n loads `file:` icons
// relative to the .node.js / .credentials.js file).
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
for (const dir of ['nodes', 'credentials']) {
	const src = path.join(root, dir);
	if (!fs.existsSync(src)) continue;
	const walk = (d) => {
		for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
			const p = path.join(d, entry.name);
			if (entry.isDirectory()) walk(p);
			else if (/\.(svg|png)$/.test(entry.name)) {
				const dest = path.join(root, 'dist', path.relative(root, p));
				fs.mkdirSync(path.dirname(dest), { recursive: true });
				fs.copyFileSync(p, dest);
			}
		}
	};
	walk(src);
}
