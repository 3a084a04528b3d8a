#!/usr/bin/env node
// Prints N distinct free loopback TCP ports (held open together so they differ).
'use strict';
const net = require('node:net');
const n = Number(process.argv[2] || 1);
const servers = [];
(async () => {
	for (let i = 0; i < n; i++) {
		const s = net.createServer();
		await new Promise((r) => s.listen(0, '127.0.0.1', r));
		servers.push(s);
	}
	console.log(servers.map((s) => s.address().port).join(' '));
	servers.forEach((s) => s.close());
})();
