// withIdem against a real idem serve: one execution under concurrency, duplicates replay,
// failures are reported with signals idem classifies, refusals throw the right error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Idem, withIdem, InProgressError, NeedsReviewError, BlockedError, FailureError } from '../dist/index.js';
import { startIdem, freshNs, freePort } from './server.mjs';
import { silentServer, statusServer } from './destinations.mjs';

let idem;
let client;
before(async () => {
	idem = await startIdem();
	client = new Idem({ url: idem.url });
});
after(async () => {
	await idem?.stop();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const record = async (ns, key) => (await client.get(ns, key)).record;

test('twenty concurrent calls with one key run the function once and all get its result', async () => {
	const namespace = freshNs();
	let runs = 0;
	const charge = () =>
		withIdem(
			'order-847:charge',
			async () => {
				runs += 1;
				await sleep(500);
				return { charge_id: 'ch_847' };
			},
			{ namespace, client, waitMs: 10_000 },
		);
	const results = await Promise.all(Array.from({ length: 20 }, charge));
	assert.equal(runs, 1);
	assert.deepEqual(results, Array(20).fill({ charge_id: 'ch_847' }));
	const rec = await record(namespace, 'order-847:charge');
	assert.equal(rec.state, 'completed');
	assert.equal(rec.attempt, 1);
});

test('twenty concurrent calls without waiting: one runs, nineteen are told in_flight', async () => {
	const namespace = freshNs();
	let runs = 0;
	const settled = await Promise.allSettled(
		Array.from({ length: 20 }, () =>
			withIdem(
				'job-1',
				async () => {
					runs += 1;
					await sleep(800);
					return 2;
				},
				{ namespace, client },
			),
		),
	);
	assert.equal(runs, 1);
	const ok = settled.filter((s) => s.status === 'fulfilled');
	const busy = settled.filter((s) => s.status === 'rejected');
	assert.deepEqual(ok.map((s) => s.value), [2]);
	assert.equal(busy.length, 19);
	for (const s of busy) {
		assert.ok(s.reason instanceof InProgressError);
		assert.equal(s.reason.outcome, 'in_flight');
		assert.ok(s.reason.retryAfterMs > 0);
	}
});

test('heartbeats keep a long run past its lease', async () => {
	const namespace = freshNs();
	let runs = 0;
	const job = () =>
		withIdem(
			'long',
			async () => {
				runs += 1;
				await sleep(1200);
				return 'done';
			},
			{ namespace, client, leaseMs: 300 },
		);
	const first = job();
	await sleep(700);
	await assert.rejects(job(), (e) => e instanceof InProgressError && e.outcome === 'in_flight');
	assert.equal(await first, 'done');
	assert.equal(runs, 1);
	const rec = await record(namespace, 'long');
	assert.equal(rec.state, 'completed');
	assert.equal(rec.attempt, 1);
});

test('a duplicate gets the stored result without running', async () => {
	const namespace = freshNs();
	let runs = 0;
	const invoice = () => withIdem('invoice-7', () => (runs += 1, { invoice: 7 }), { namespace, client });
	assert.deepEqual(await invoice(), { invoice: 7 });
	assert.deepEqual(await invoice(), { invoice: 7 });
	assert.deepEqual(await invoice(), { invoice: 7 });
	assert.equal(runs, 1);
	const { events } = await client.get(namespace, 'invoice-7');
	assert.equal(events.filter((e) => e.type === 'duplicate_hit').length, 2);
});

test('the context tells the attempt; the default client and namespace come from the environment', async () => {
	const namespace = freshNs();
	process.env.IDEM_URL = idem.url;
	process.env.IDEM_NAMESPACE = namespace;
	try {
		const ctx = await withIdem('ctx', (c) => ({ attempt: c.attempt, resumed: c.resumed, ns: c.namespace }));
		assert.deepEqual(ctx, { attempt: 1, resumed: false, ns: namespace });
	} finally {
		delete process.env.IDEM_URL;
		delete process.env.IDEM_NAMESPACE;
	}
});

test('a changed payload for a done key is blocked as conflict', async () => {
	const namespace = freshNs();
	const charge = (amount) => withIdem('o-1', () => amount, { namespace, client, payload: { amount } });
	assert.equal(await charge(100), 100);
	assert.equal(await charge(100), 100);
	await assert.rejects(charge(250), (e) => e instanceof BlockedError && e.outcome === 'conflict');
});

test('an exception after a timeout goes to review', async () => {
	const namespace = freshNs();
	const silent = await silentServer();
	try {
		let runs = 0;
		const pay = () =>
			withIdem(
				'pay-1',
				async () => {
					runs += 1;
					await fetch(`http://127.0.0.1:${silent.port}/charge`, {
						method: 'POST',
						body: '{"amount":5}',
						signal: AbortSignal.timeout(300),
					});
				},
				{ namespace, client },
			);
		await assert.rejects(pay(), (e) => e.name === 'TimeoutError');
		const rec = await record(namespace, 'pay-1');
		assert.equal(rec.state, 'needs_review');
		assert.equal(rec.last_error.category, 'timeout');
		await assert.rejects(pay(), (e) => e instanceof NeedsReviewError && e.outcome === 'needs_review');
		assert.equal(runs, 1);
	} finally {
		await silent.close();
	}
});

test('connection refused is retryable, and the next call backs off', async () => {
	const namespace = freshNs();
	await client.patchNamespace(namespace, { retry: { base_ms: 3_600_000, max_ms: 3_600_000 } });
	const port = await freePort();
	const call = () => withIdem('refused', () => fetch(`http://127.0.0.1:${port}/`, { method: 'POST' }), { namespace, client });
	await assert.rejects(call(), (e) => e instanceof TypeError);
	const rec = await record(namespace, 'refused');
	assert.equal(rec.state, 'failed_retryable');
	assert.equal(rec.last_error.category, 'connection');
	await assert.rejects(call(), (e) => e instanceof InProgressError && e.outcome === 'backoff' && e.retryAfterMs > 0);
});

test('HTTP 503 with Retry-After backs off at least that long; 500 goes to review; 400 is permanent', async () => {
	const namespace = freshNs();
	const dest = await statusServer();
	try {
		const call = (status, q = '') =>
			withIdem(
				`s-${status}`,
				async () => {
					const res = await fetch(`${dest.url}/${status}${q}`);
					if (!res.ok) throw FailureError.fromResponse(res);
				},
				{ namespace, client },
			);
		const before = Date.now();
		await assert.rejects(call(503, '?retry_after=120'), FailureError);
		await assert.rejects(call(500), FailureError);
		await assert.rejects(call(400), FailureError);
		const r503 = await record(namespace, 's-503');
		assert.equal(r503.state, 'failed_retryable');
		assert.equal(r503.last_error.http_status, 503);
		assert.ok(Date.parse(r503.not_before) - before >= 119_000);
		assert.equal((await record(namespace, 's-500')).state, 'needs_review');
		assert.equal((await record(namespace, 's-400')).state, 'failed_permanent');
		await assert.rejects(call(400), (e) => e instanceof BlockedError && e.outcome === 'failed_permanent');
	} finally {
		await dest.close();
	}
});

test('an axios-style error is classified by its response status', async () => {
	const namespace = freshNs();
	const err = Object.assign(new Error('Request failed with status code 429'), {
		response: { status: 429, headers: { 'retry-after': '5' } },
	});
	await assert.rejects(withIdem('ax', () => Promise.reject(err), { namespace, client }), err);
	const rec = await record(namespace, 'ax');
	assert.equal(rec.state, 'failed_retryable');
	assert.equal(rec.last_error.http_status, 429);
});

test('an unknown error goes to review; a FailureError with a kind decides', async () => {
	const namespace = freshNs();
	await assert.rejects(withIdem('plain', () => { throw new RangeError('odd'); }, { namespace, client }), RangeError);
	await assert.rejects(
		withIdem('marked', () => { throw new FailureError('no card on file', { kind: 'permanent', category: 'business' }); }, { namespace, client }),
		FailureError,
	);
	assert.equal((await record(namespace, 'plain')).state, 'needs_review');
	const marked = await record(namespace, 'marked');
	assert.equal(marked.state, 'failed_permanent');
	assert.equal(marked.last_error.category, 'business');
});

test('a value that is not JSON still completes, and says so', async () => {
	const namespace = freshNs();
	let runs = 0;
	const call = () => withIdem('big', () => (runs += 1, 10n), { namespace, client });
	await assert.rejects(call(), /not JSON/);
	assert.equal((await record(namespace, 'big')).state, 'completed');
	assert.equal(await call(), null);
	assert.equal(runs, 1);
});

test('a resumed attempt reuses the prepared payload', async () => {
	const namespace = freshNs();
	await client.patchNamespace(namespace, { retry: { base_ms: 1, max_ms: 1 } });
	const seen = [];
	const followUp = () =>
		withIdem(
			'followup-5',
			async (ctx) => {
				seen.push([ctx.attempt, ctx.resumed, ctx.preparedPayload]);
				if (ctx.preparedPayload === null) {
					await ctx.client.prepare(ctx.namespace, ctx.key, { token: ctx.token, payload: { text: 'draft 1' } });
					throw new FailureError('mail server not reachable', { category: 'connection', sent: false });
				}
				return `sent ${ctx.preparedPayload.text}`;
			},
			{ namespace, client },
		);
	await assert.rejects(followUp(), FailureError);
	await sleep(50);
	assert.equal(await followUp(), 'sent draft 1');
	assert.deepEqual(seen, [
		[1, false, null],
		[2, true, { text: 'draft 1' }],
	]);
});
