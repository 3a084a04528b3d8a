#!/usr/bin/env node
// DEV AID ONLY — never used by CI. A tiny in-memory stand-in for `idem serve` (claim with
// wait_ms, complete, fail, GET record) so the n8n side of the e2e can be debugged before or
// without a Rust build:  IDEM_BIN=integrations/n8n/e2e/dev/fake-idem.js bash integrations/n8n/e2e/run.sh
// It implements only the happy paths the e2e exercises; the real contract is the Rust server's.
'use strict';
const http = require('node:http');
const crypto = require('node:crypto');

const argv = process.argv.slice(2);
if (argv[0] !== 'serve') {
	console.error('fake-idem: only `serve` is supported');
	process.exit(1);
}
const listen = argv[argv.indexOf('--listen') + 1] || '127.0.0.1:7780';
const [host, port] = listen.split(':');
const records = new Map();
const waiters = new Map();
const now = () => Date.now();
const canon = (v) =>
	v === null || typeof v !== 'object'
		? JSON.stringify(v)
		: Array.isArray(v)
			? `[${v.map(canon).join(',')}]`
			: `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`;
const view = (r) => ({ ...r, token: undefined, events: undefined });
function send(res, status, body, headers = {}) {
	res.writeHead(status, { 'content-type': status >= 400 && !body.outcome ? 'application/problem+json' : 'application/json', ...headers });
	res.end(JSON.stringify(body));
}
function claimAnswer(r, fp) {
	if (r.fingerprint && fp && r.fingerprint !== fp) return [422, { outcome: 'conflict', record: view(r) }];
	if (r.state === 'completed') {
		r.events.push({ type: 'duplicate_hit' });
		return [200, { outcome: 'completed', record: view(r) }, { 'Idempotent-Replayed': 'true' }];
	}
	if (r.state === 'processing' && r.lease > now()) return [409, { outcome: 'in_flight', retry_after_ms: r.lease - now(), record: view(r) }];
	return null;
}
const server = http.createServer((req, res) => {
	let raw = '';
	req.on('data', (c) => (raw += c));
	req.on('end', () => {
		const u = new URL(req.url, 'http://x');
		if (u.pathname === '/healthz') return send(res, 200, { ok: true });
		const m = u.pathname.match(/^\/v1\/namespaces\/([^/]+)\/keys\/([^/]+)(?:\/(\w+))?$/);
		if (!m) return send(res, 404, { code: 'not_found' });
		const id = `${decodeURIComponent(m[1])}/${decodeURIComponent(m[2])}`;
		const verb = m[3];
		let body = {};
		try {
			body = raw ? JSON.parse(raw) : {};
		} catch {
			return send(res, 400, { code: 'invalid_json' });
		}
		const r = records.get(id);
		if (!verb && req.method === 'GET') return r ? send(res, 200, { record: view(r), events: r.events }) : send(res, 404, { code: 'not_found' });
		if (verb === 'claim') {
			const fp = body.payload !== undefined ? crypto.createHash('sha256').update(canon(body.payload)).digest('hex') : null;
			if (r) {
				const a = claimAnswer(r, fp);
				if (a && a[1].outcome === 'in_flight' && body.wait_ms) {
					const list = waiters.get(id) || [];
					list.push(() => send(res, ...claimAnswer(r, fp)));
					waiters.set(id, list);
					return;
				}
				if (a) return send(res, ...a);
			}
			const token = crypto.randomBytes(8).toString('hex');
			const rec = { namespace: m[1], key: decodeURIComponent(m[2]), state: 'processing', attempt: (r?.attempt || 0) + 1, fingerprint: fp, lease: now() + 30000, token, result: null, events: [{ type: 'acquired' }] };
			records.set(id, rec);
			return send(res, 201, { outcome: 'acquired', token, resumed: !!r, record: view(rec) });
		}
		if (!r || body.token !== r.token) return send(res, 409, { code: 'lease_lost' });
		if (verb === 'complete') {
			r.state = 'completed';
			r.result = body.result ?? null;
			r.events.push({ type: 'completed' });
			for (const w of waiters.get(id) || []) w();
			waiters.delete(id);
			return send(res, 200, { state: 'completed', record: view(r) });
		}
		if (verb === 'fail') {
			const st = body.http_status;
			const cls = [408, 425, 429, 503].includes(st) ? 'retryable' : st >= 500 ? 'ambiguous' : st >= 400 ? 'permanent' : body.sent === false ? 'retryable' : 'ambiguous';
			r.state = { retryable: 'failed_retryable', ambiguous: 'needs_review', permanent: 'failed_permanent' }[cls];
			r.last_error = { ...(body.error || {}), http_status: st ?? null };
			const notBefore = new Date(now() + 2000).toISOString();
			return send(res, 200, { state: r.state, class: cls, retry: { allowed: cls === 'retryable', attempt: r.attempt, max_attempts: 5, not_before: cls === 'retryable' ? notBefore : null }, record: view(r) });
		}
		return send(res, 404, { code: 'not_found' });
	});
});
server.listen(Number(port), host, () => console.log(`listening on ${listen}`));
process.on('SIGTERM', () => process.exit(0));
