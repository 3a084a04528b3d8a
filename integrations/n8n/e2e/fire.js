#!/usr/bin/env node
// Sends the same webhook event N times at once and prints one JSON line per answer:
//   node fire.js URL BODY_JSON N [TIMEOUT_MS] [HEADERS_JSON]
// → [{"status":200,"body":{…},"ms":12}, …] on stdout (ms: until the answer was read).
// Loopback only (refuses other hosts).
// HEADERS_JSON (a list of [name, value] pairs, as a signer prints them) is set over the
// default headers (JSON content type, a dummy Stripe-Signature).
'use strict';
const [url, body, n = '1', timeoutMs = '90000', extra = '[]'] = process.argv.slice(2);
const host = new URL(url).hostname;
if (!['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host)) {
	console.error(`fire.js: refusing non-loopback host ${host}`);
	process.exit(2);
}
const pairs = JSON.parse(extra);
async function one() {
	const headers = new Headers({ 'content-type': 'application/json', 'stripe-signature': `t=${Date.now()},v1=${Math.random()}` });
	for (const [name, value] of pairs) headers.set(name, value);
	const ac = new AbortController();
	const t = setTimeout(() => ac.abort(), Number(timeoutMs));
	const t0 = Date.now();
	try {
		const r = await fetch(url, {
			method: 'POST',
			headers,
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
		return { status: r.status, body: parsed, ms: Date.now() - t0 };
	} catch (e) {
		return { status: 0, error: String(e && e.message) };
	} finally {
		clearTimeout(t);
	}
}
Promise.all(Array.from({ length: Number(n) }, one)).then((rs) => console.log(JSON.stringify(rs)));
