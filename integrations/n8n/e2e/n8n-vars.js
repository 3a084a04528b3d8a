#!/usr/bin/env node
// Sets global n8n Variables ($vars.NAME) in a stopped n8n's SQLite database, using the sqlite3
// module of that n8n install. (The Variables UI/API is a licensed feature; expressions read the
// table regardless.)   node n8n-vars.js N8N_INSTALL_DIR DB_FILE NAME=VALUE…
'use strict';
const path = require('node:path');
const crypto = require('node:crypto');
const [installDir, dbFile, ...pairs] = process.argv.slice(2);
const sqlite3 = require(path.join(installDir, 'node_modules', 'sqlite3'));
const db = new sqlite3.Database(dbFile);
const run = (sql, params) =>
	new Promise((resolve, reject) => db.run(sql, params, (err) => (err ? reject(err) : resolve())));
(async () => {
	for (const pair of pairs) {
		const i = pair.indexOf('=');
		const key = pair.slice(0, i);
		const value = pair.slice(i + 1);
		await run('DELETE FROM variables WHERE key = ? AND projectId IS NULL', [key]);
		await run('INSERT INTO variables (id, key, type, value, projectId) VALUES (?, ?, ?, ?, NULL)', [
			crypto.randomBytes(8).toString('hex'),
			key,
			'string',
			value,
		]);
	}
	db.close();
})().catch((e) => {
	console.error(`n8n-vars: ${e.message}`);
	process.exit(1);
});
