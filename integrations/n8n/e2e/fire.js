#!/usr/bin/env node
// Sends the same webhook event N times at once and prints one JSON line per answer:
//   node fire.js URL BODY_JSON N [TIMEOUT_MS]
// → [{"status":200,"body":{…}}, …] on stdout. Loopback only (refuses other hosts).
'use strict';
const [url, body, n = '1', timeoutMs = '90000'] = process.argv.slice(2);
const host = new URL(url).hostname;
if (!['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host)) {
	console.error(`fire.js: refusing non-loopback host ${host}`);
	process.exit(2);
}
async function one() {
	const ac = new AbortController();
	const t = setTimeout(() => ac.abort(), Number(timeoutMs));
	try {
		const r = await fetch(url, {
			method: 'POST',
			headers: { 'content-type': 'application/json', 'stripe-signature': `t=${Date.now()},v1=${Math.random()}` },
			body,
			signal: ac.signal,
		});
		const text = await r.text();
		let parsed;
		try {
			parsed = JSON.parse(text);
		} catch {
			parsed = text;
		}
		return { status: r.status, body: parsed };
	} catch (e) {
		return { status: 0, error: String(e && e.message) };
	} finally {
		clearTimeout(t);
	}
}
Promise.all(Array.from({ length: Number(n) }, one)).then((rs) => console.log(JSON.stringify(rs)));
