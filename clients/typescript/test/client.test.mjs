// The client's operations against a real idem serve, and the errors it throws (with the
// problem+json `code`).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Idem, IdemApiError, IdemUnavailableError } from '../dist/index.js';
import { startIdem, freshNs, freePort } from './server.mjs';
import { statusServer } from './destinations.mjs';

let idem;
let auth;
let client;
before(async () => {
	[idem, auth] = await Promise.all([startIdem(), startIdem()]);
	client = new Idem({ url: idem.url });
});
after(async () => {
	await Promise.all([idem?.stop(), auth?.stop()]);
});

const code = (status, c) => (e) => e instanceof IdemApiError && e.status === status && e.code === c;

test('claim, heartbeat, complete, then a duplicate replays the result', async () => {
	const ns = freshNs();
	const first = await client.claim(ns, 'evt_1:charge', { payload: { amount: 5 }, owner: 'exec-1' });
	assert.equal(first.outcome, 'acquired');
	assert.equal(first.resumed, false);
	assert.equal(first.record.state, 'processing');
	const token = first.token;
	assert.equal((await client.heartbeat(ns, 'evt_1:charge', { token, lease_ms: 60_000 })).state, 'processing');
	const done = await client.complete(ns, 'evt_1:charge', { token, result: { charge: 'ch_1' }, external_ref: 'ch_1' });
	assert.equal(done.state, 'completed');
	const again = await client.claim(ns, 'evt_1:charge', { payload: { amount: 5 } });
	assert.equal(again.outcome, 'completed');
	assert.deepEqual(again.record.result, { charge: 'ch_1' });
	assert.equal(again.record.external_ref, 'ch_1');
	assert.equal(again.token, undefined);
	assert.equal((await client.claim(ns, 'evt_1:charge', { payload: { amount: 6 } })).outcome, 'conflict');
	const { events } = await client.get(ns, 'evt_1:charge');
	assert.equal(events[0].type, 'acquired');
	assert.ok(events.some((e) => e.type === 'duplicate_hit'));
});

test('keys with reserved characters are percent-encoded', async () => {
	const ns = freshNs();
	const key = 'a/b?c#d%e:f';
	assert.equal((await client.claim(ns, key)).record.key, key);
	assert.equal((await client.get(ns, key)).record.key, key);
});

test('fail answers the decision; prepare is resumed with its payload', async () => {
	const ns = freshNs();
	const { token } = await client.claim(ns, 'k');
	const ans = await client.fail(ns, 'k', { token, http_status: 503, retry_after: 30, error: { category: 'http', message: 'busy' } });
	assert.equal(ans.state, 'failed_retryable');
	assert.equal(ans.class, 'retryable');
	assert.equal(ans.retry.allowed, true);
	const c = await client.claim(ns, 'draft', { lease_ms: 200 });
	assert.equal((await client.prepare(ns, 'draft', { token: c.token, payload: { text: 'hi' } })).state, 'prepared');
	await new Promise((r) => setTimeout(r, 400));
	const again = await client.claim(ns, 'draft');
	assert.equal(again.outcome, 'acquired');
	assert.equal(again.resumed, true);
	assert.deepEqual(again.record.prepared_payload, { text: 'hi' });
});

test('derive a key; whoami on an open server', async () => {
	assert.equal(await client.deriveKey({ event: { id: 'evt_9', type: 'charge' }, fields: ['/id', '/type'], prefix: 'stripe' }), 'stripe:evt_9:charge');
	const who = await client.whoami();
	assert.equal(who.role, 'admin');
	assert.equal(who.namespace, '*');
});

test('an effect is sent once and replayed', async () => {
	const ns = freshNs();
	const dest = await statusServer();
	try {
		await client.patchNamespace(ns, { egress: { allow: [dest.host] } });
		const req = { method: 'POST', url: `${dest.url}/v1/orders`, body: { sku: 'A1' } };
		const first = await client.effect(ns, 'order-1', req);
		assert.equal(first.outcome, 'performed');
		assert.equal(first.response.status, 201);
		assert.deepEqual(first.response.body, { id: 'obj_1' });
		const second = await client.effect(ns, 'order-1', req);
		assert.equal(second.outcome, 'completed');
		assert.deepEqual(second.response.body, { id: 'obj_1' });
		assert.deepEqual(dest.got, [{ body: { sku: 'A1' }, key: 'order-1' }]);
	} finally {
		await dest.close();
	}
});

test('errors carry the problem code', async () => {
	const ns = freshNs();
	await assert.rejects(client.claim(ns, 'has space'), code(400, 'invalid_key'));
	await assert.rejects(client.claim('bad namespace!', 'k'), code(400, 'invalid_namespace'));
	await assert.rejects(client.claim(ns, 'both', { payload: { a: 1 }, fingerprint: '0'.repeat(64) }), code(422, 'invalid_field'));
	await assert.rejects(client.get(ns, 'never-seen'), code(404, 'not_found'));
	await assert.rejects(
		client.deriveKey({ event: { id: 1 }, fields: ['/missing'] }),
		(e) => code(422, 'missing_identity_field')(e) && `${e.field} ${e.detail}`.includes('missing'),
	);
	const { token } = await client.claim(ns, 'k');
	await assert.rejects(client.complete(ns, 'k', { token: 'made-up-token' }), code(409, 'lease_lost'));
	await client.complete(ns, 'k', { token, result: { v: 1 } });
	await client.complete(ns, 'k', { token, result: { v: 1 } });
	await assert.rejects(client.complete(ns, 'k', { token, result: { v: 2 } }), code(409, 'result_mismatch'));
	const t2 = (await client.claim(ns, 'k2')).token;
	await client.fail(ns, 'k2', { token: t2, kind: 'permanent', error: { category: 'business' } });
	await assert.rejects(client.fail(ns, 'k2', { token: t2, kind: 'permanent' }), code(409, 'invalid_transition'));
	const t3 = (await client.claim(ns, 'k3')).token;
	await assert.rejects(client.fail(ns, 'k3', { token: t3, error: { category: 'mystery' } }), code(422, 'invalid_field'));
});

test('auth: 401 without or with a wrong token, 403 out of scope, whoami of a scoped worker', async () => {
	const worker = auth.token('shop', 'worker');
	await new Promise((r) => setTimeout(r, 1200)); // the server notices the first token within a second
	await assert.rejects(new Idem({ url: auth.url }).claim('shop', 'k'), code(401, 'unauthorized'));
	await assert.rejects(new Idem({ url: auth.url, token: 'not-a-token' }).whoami(), code(401, 'unauthorized'));
	const c = new Idem({ url: auth.url, token: worker });
	const who = await c.whoami();
	assert.equal(who.role, 'worker');
	assert.equal(who.namespace, 'shop');
	assert.equal(typeof who.token_id, 'number');
	assert.equal((await c.claim('shop', 'k')).outcome, 'acquired');
	await assert.rejects(c.claim('other', 'k'), code(403, 'forbidden'));
	await assert.rejects(c.list('shop'), code(403, 'forbidden'));
	assert.ok(!String(c).includes(worker));
	assert.ok(!JSON.stringify(c).includes(worker));
});

test('the token and URL come from the environment', async () => {
	const op = auth.token('*', 'operator');
	process.env.IDEM_URL = auth.url;
	process.env.IDEM_TOKEN = op;
	try {
		let who;
		for (let i = 0; i < 30 && !who; i++) {
			try {
				who = await new Idem().whoami();
			} catch (e) {
				if (!code(401, 'unauthorized')(e)) throw e;
				await new Promise((r) => setTimeout(r, 100));
			}
		}
		assert.equal(who?.role, 'operator');
	} finally {
		delete process.env.IDEM_URL;
		delete process.env.IDEM_TOKEN;
	}
});

test('an unreachable server is IdemUnavailableError', async () => {
	const port = await freePort();
	await assert.rejects(new Idem({ url: `http://127.0.0.1:${port}`, timeoutMs: 2000 }).whoami(), IdemUnavailableError);
});

test('a refused request does not break the next one on the same connection', async () => {
	// idem closes a keep-alive connection after refusing a request whose body it did not read.
	const ns = freshNs();
	for (let i = 0; i < 100; i++) {
		await assert.rejects(client.claim(ns, 'has space', { payload: { n: i } }), code(400, 'invalid_key'));
		assert.equal((await client.claim(ns, `ok-${i}`)).outcome, 'acquired');
	}
});
