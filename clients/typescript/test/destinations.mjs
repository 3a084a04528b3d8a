// Destinations that misbehave, for failure tests.
import { createServer as createTcp } from 'node:net';
import { createServer as createHttp } from 'node:http';

/** Accepts connections and never answers (a destination that hangs). */
export function silentServer() {
	const sockets = new Set();
	const srv = createTcp((s) => {
		sockets.add(s);
		s.on('error', () => {});
	});
	return new Promise((resolve) =>
		srv.listen(0, '127.0.0.1', () =>
			resolve({
				port: srv.address().port,
				close: () =>
					new Promise((r) => {
						for (const s of sockets) s.destroy();
						srv.close(r);
					}),
			}),
		),
	);
}

/** GET /<status>?retry_after=N answers that status; POST records the body and answers 201 JSON. */
export function statusServer() {
	const got = [];
	const srv = createHttp((req, res) => {
		const u = new URL(req.url, 'http://x');
		if (req.method === 'POST') {
			let body = '';
			req.on('data', (c) => (body += c));
			req.on('end', () => {
				got.push({ body: body ? JSON.parse(body) : null, key: req.headers['idempotency-key'] ?? null });
				res.writeHead(201, { 'content-type': 'application/json' });
				res.end(JSON.stringify({ id: `obj_${got.length}` }));
			});
			return;
		}
		const headers = {};
		if (u.searchParams.has('retry_after')) headers['retry-after'] = u.searchParams.get('retry_after');
		res.writeHead(parseInt(u.pathname.slice(1), 10), headers);
		res.end();
	});
	return new Promise((resolve) =>
		srv.listen(0, '127.0.0.1', () =>
			resolve({
				host: `127.0.0.1:${srv.address().port}`,
				url: `http://127.0.0.1:${srv.address().port}`,
				got,
				close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }),
			}),
		),
	);
}
