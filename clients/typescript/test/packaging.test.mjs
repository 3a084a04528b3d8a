// The package as its users load it: `import` and `require` by name (the latter is how an
// n8n Code node loads it), and the n8n Code node example run the way n8n runs a Code node's
// code (an async function body with $env, $input, $execution, this.helpers and require).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { startIdem, freshNs } from './server.mjs';

let idem;
before(async () => {
	idem = await startIdem();
});
after(async () => {
	await idem?.stop();
});

test('import and require by package name give the same API', async () => {
	const esm = await import('idem-ledger');
	const cjs = createRequire(import.meta.url)('idem-ledger');
	for (const name of ['Idem', 'withIdem', 'IdemApiError', 'InProgressError', 'NeedsReviewError', 'BlockedError', 'FailureError', 'failSignals']) {
		assert.equal(typeof esm[name], 'function', name);
		assert.equal(cjs[name], esm[name], name);
	}
});

test('the n8n Code node example sends each confirmation once across retries', async () => {
	const sent = [];
	const mailer = createServer((req, res) => {
		let body = '';
		req.on('data', (c) => (body += c));
		req.on('end', () => {
			sent.push(JSON.parse(body));
			res.writeHead(200, { 'content-type': 'application/json' });
			res.end(JSON.stringify({ id: `msg_${sent.length}` }));
		});
	});
	await new Promise((r) => mailer.listen(0, '127.0.0.1', r));
	try {
		const code = readFileSync(new URL('../examples/n8n-code-node.js', import.meta.url), 'utf8')
			.replace("'shop'", JSON.stringify(freshNs()));
		const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
		const run = new AsyncFunction('$env', '$input', '$execution', 'require', code);
		const items = [{ json: { order_id: 1, email: 'a@example.com' } }, { json: { order_id: 2, email: 'b@example.com' } }];
		const ctx = {
			helpers: {
				async httpRequest({ method, url, body }) {
					const res = await fetch(url, { method, body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
					return res.json();
				},
			},
		};
		const $env = { IDEM_URL: idem.url, MAILER_URL: `http://127.0.0.1:${mailer.address().port}/send` };
		const $input = { all: () => items };
		const require = createRequire(import.meta.url);
		const first = await run.call(ctx, $env, $input, { id: 'exec-1' }, require);
		const retry = await run.call(ctx, $env, $input, { id: 'exec-2' }, require);
		assert.deepEqual(first.map((i) => i.json), [
			{ order_id: 1, status: 'sent', message_id: 'msg_1' },
			{ order_id: 2, status: 'sent', message_id: 'msg_2' },
		]);
		assert.deepEqual(retry, first);
		assert.equal(sent.length, 2);
	} finally {
		await new Promise((r) => mailer.close(r));
	}
});
