#!/usr/bin/env node
// A counting sink standing in for the CRM / mail / payment API of the workflows.
// Every POST is counted per Idempotency-Key header (or ?key=, or the path when neither is given)
// and answered 200 after a short delay (SINK_DELAY_MS, default 400) that widens the race window
// of concurrent deliveries — or with status NNN when the key contains `@NNN` (to drive the
// error branch). A POST with ?slow=1 is answered only after SINK_SLOW_MS (default 5000): the
// caller's timeout fires first, after the effect was counted (a timeout that did act).
// GET /counts answers {"<key>": n, …}; GET /bodies?key=K the bodies received under K, in order
// (parsed JSON where they are JSON). Loopback only.
//   node sink.js --port-file FILE   (listens on 127.0.0.1, port 0 = any free port)
'use strict';
const http = require('node:http');
const fs = require('node:fs');

const args = process.argv.slice(2);
const portFile = args[args.indexOf('--port-file') + 1];
const delay = Number(process.env.SINK_DELAY_MS ?? 400);
const slowDelay = Number(process.env.SINK_SLOW_MS ?? 5000);
const counts = Object.create(null);
// The Authorization header last seen per key (GET /auth?key=K), so a test can tell that a
// credential reached the destination while it must reach nothing else.
const auths = Object.create(null);
const bodies = Object.create(null);
let seq = 0;

const server = http.createServer((req, res) => {
	const url = new URL(req.url, 'http://127.0.0.1');
	if (req.method === 'GET' && url.pathname === '/counts') {
		res.writeHead(200, { 'content-type': 'application/json' });
		res.end(JSON.stringify(counts));
		return;
	}
	if (req.method === 'GET' && url.pathname === '/auth') {
		res.writeHead(200, { 'content-type': 'application/json' });
		res.end(JSON.stringify({ authorization: auths[url.searchParams.get('key')] ?? null }));
		return;
	}
	if (req.method === 'GET' && url.pathname === '/bodies') {
		res.writeHead(200, { 'content-type': 'application/json' });
		res.end(JSON.stringify(bodies[url.searchParams.get('key')] ?? []));
		return;
	}
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		if (req.method !== 'POST') {
			res.writeHead(405).end();
			return;
		}
		const key = req.headers['idempotency-key'] || url.searchParams.get('key') || url.pathname;
		counts[key] = (counts[key] || 0) + 1;
		if (req.headers.authorization) auths[key] = req.headers.authorization;
		const raw = Buffer.concat(chunks).toString('utf8');
		let parsed = raw;
		try {
			parsed = JSON.parse(raw);
		} catch {
			// kept as text
		}
		(bodies[key] ??= []).push(parsed);
		const id = `eff_${++seq}`;
		const forced = /@([1-5][0-9][0-9])(?![0-9])/.exec(String(key));
		const status = forced ? Number(forced[1]) : 200;
		setTimeout(
			() => {
				res.writeHead(status, {
					'content-type': 'application/json',
					...(status === 503 ? { 'retry-after': '2' } : {}),
				});
				res.end(JSON.stringify({ id, key, count: counts[key] }));
			},
			url.searchParams.get('slow') === '1' ? slowDelay : delay,
		);
	});
});
server.listen(0, '127.0.0.1', () => {
	const { port } = server.address();
	if (portFile) fs.writeFileSync(portFile, String(port));
	else console.log(port);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
