const test = require('node:test');
const assert = require('node:assert/strict');
const { run, IdempotencyGate } = require('./helpers');

const claimParams = (over = {}) => ({
	operation: 'claim',
	namespace: 'shop',
	key: (i) => `evt_${i}:crm`,
	fingerprintMode: 'payload',
	payload: (i) => ({ id: `evt_${i}`, amount: 100 }),
	claimOptions: {},
	...over,
});

const record = (state) => ({ namespace: 'shop', key: 'k', state, attempt: 1, result: state === 'completed' ? { id: 'c_1' } : null });

test('claim builds the request: URL, body, bearer token, JSON, never throwing on 4xx', async () => {
	const { requests } = await run({
		items: [{ body: { id: 'evt_0' } }],
		params: claimParams({ claimOptions: { leaseMs: 60000, waitMs: 2000 } }),
		respond: () => ({ statusCode: 201, body: { outcome: 'acquired', token: 'T1', resumed: false, record: record('processing') } }),
	});
	assert.equal(requests.length, 1);
	const r = requests[0];
	assert.equal(r.method, 'POST');
	assert.equal(r.url, 'http://127.0.0.1:7780/v1/namespaces/shop/keys/evt_0%3Acrm/claim');
	assert.deepEqual(r.body, { payload: { id: 'evt_0', amount: 100 }, owner: '42', lease_ms: 60000, wait_ms: 2000 });
	assert.equal(r.headers.Authorization, 'Bearer tok_secret');
	assert.equal(r.json, true);
	assert.equal(r.returnFullResponse, true);
	assert.equal(r.ignoreHttpStatusErrors, true);
	assert.equal(r.timeout, 12000);
});

test('no token configured: no Authorization header', async () => {
	const { requests } = await run({
		items: [{}],
		credentials: { baseUrl: 'http://127.0.0.1:1', token: '' },
		params: claimParams(),
		respond: () => ({ statusCode: 201, body: { outcome: 'acquired', token: 'T', resumed: false, record: record('processing') } }),
	});
	assert.equal(requests[0].headers.Authorization, undefined);
});

test('claim routes each outcome to its output and keeps the input item', async () => {
	const answers = [
		[201, { outcome: 'acquired', token: 'T', resumed: false, record: record('processing') }],
		[200, { outcome: 'completed', record: record('completed') }, { 'idempotent-replayed': 'true' }],
		[409, { outcome: 'in_flight', retry_after_ms: 1234, record: record('processing') }],
		[409, { outcome: 'needs_review', record: record('needs_review') }],
		[422, { outcome: 'conflict', record: record('processing') }],
		[503, { outcome: 'paused', record: null }],
		[200, { outcome: 'failed_permanent', record: record('failed_permanent') }, { 'idempotent-replayed': 'true' }],
		[409, { outcome: 'backoff', retry_after_ms: 50, record: record('failed_retryable') }],
		[409, { outcome: 'awaiting_approval', record: record('awaiting_approval') }],
		[429, { outcome: 'limited', record: null }],
	];
	const items = answers.map((_, i) => ({ body: { id: `evt_${i}` }, headers: { 'stripe-signature': 'x' } }));
	const { out } = await run({
		items,
		params: claimParams(),
		respond: (req, n) => ({ statusCode: answers[n][0], body: JSON.stringify(answers[n][1]), headers: answers[n][2] ?? {} }),
	});
	assert.equal(out.length, 5);
	const outcomes = out.map((o) => o.map((it) => it.json.idem.outcome));
	assert.deepEqual(outcomes, [
		['acquired'],
		['completed'],
		['in_flight', 'paused', 'backoff', 'awaiting_approval', 'limited'],
		['needs_review'],
		['conflict', 'failed_permanent'],
	]);
	const proceed = out[0][0];
	assert.equal(proceed.json.idem.token, 'T');
	assert.equal(proceed.json.idem.key, 'evt_0:crm');
	assert.equal(proceed.json.idem.resumed, false);
	assert.equal(proceed.json.body.id, 'evt_0', 'input item kept');
	assert.deepEqual(proceed.pairedItem, { item: 0 });
	const dup = out[1][0];
	assert.equal(dup.json.idem.replayed, true);
	assert.deepEqual(dup.json.idem.record.result, { id: 'c_1' });
	assert.equal(dup.json.idem.token, undefined);
	assert.equal(out[2][0].json.idem.retry_after_ms, 1234);
	assert.deepEqual(out[2][1].pairedItem, { item: 5 });
});

test('claim: an error answer without outcome is a clear error, never Proceed', async () => {
	await assert.rejects(
		run({
			items: [{}],
			params: claimParams(),
			respond: () => ({ statusCode: 401, body: { type: 'about:blank', title: 'Unauthorized', code: 'unauthorized', detail: 'missing or wrong token' } }),
		}),
		/idem answered 401: unauthorized: missing or wrong token/,
	);
});

test('claim: an unknown outcome is refused, never Proceed', async () => {
	await assert.rejects(
		run({ items: [{}], params: claimParams(), respond: () => ({ statusCode: 200, body: { outcome: 'teleported' } }) }),
		(e) => /idem answered 200/.test(e.message) && /teleported/.test(e.description),
	);
});

test('claim: idem unreachable with Continue On Fail lands on Busy, not Proceed', async () => {
	const { out } = await run({
		items: [{ body: { id: 'evt_1' } }],
		params: claimParams(),
		continueOnFail: true,
		respond: () => {
			const e = new Error('connect ECONNREFUSED 127.0.0.1:7780');
			e.code = 'ECONNREFUSED';
			throw e;
		},
	});
	assert.equal(out[0].length, 0);
	assert.equal(out[2].length, 1);
	assert.match(out[2][0].json.error, /Could not reach idem at http:\/\/127.0.0.1:7780\/: ECONNREFUSED/);
});

test('claim: a missing key is an error naming the problem, and nothing is sent', async () => {
	const { ctx, requests } = require('./helpers').makeContext({
		items: [{ body: {} }],
		params: claimParams({ key: undefined }),
		respond: () => assert.fail('must not send'),
	});
	await assert.rejects(new IdempotencyGate().execute.call(ctx), /Invalid key: the key must be a string, got nothing/);
	assert.equal(requests.length, 0);
});

test('complete sends token, result and external ref; one output', async () => {
	const { out, requests } = await run({
		items: [{ id: 'contact_9' }],
		params: {
			operation: 'complete', namespace: 'shop', key: 'evt_1:crm', leaseToken: 'T1',
			sendResult: true, result: '{"contact":"contact_9"}', externalRef: 'contact_9',
		},
		respond: () => ({ statusCode: 200, body: { state: 'completed', record: record('completed') } }),
	});
	assert.equal(requests[0].url, 'http://127.0.0.1:7780/v1/namespaces/shop/keys/evt_1%3Acrm/complete');
	assert.deepEqual(requests[0].body, { token: 'T1', result: { contact: 'contact_9' }, external_ref: 'contact_9' });
	assert.equal(out.length, 1);
	assert.equal(out[0][0].json.idem.state, 'completed');
	assert.equal(out[0][0].json.id, 'contact_9');
});

test('complete without a token explains where to get it', async () => {
	await assert.rejects(
		run({
			items: [{}],
			params: { operation: 'complete', namespace: 'shop', key: 'k', leaseToken: '', sendResult: false },
			respond: () => assert.fail('must not send'),
		}),
		/No lease token for complete/,
	);
});

test('complete: lease_lost is an error that says not to repeat the effect', async () => {
	await assert.rejects(
		run({
			items: [{}],
			params: { operation: 'complete', namespace: 'shop', key: 'k', leaseToken: 'old', sendResult: false },
			respond: () => ({ statusCode: 409, body: { code: 'lease_lost', detail: 'the lease was taken over' } }),
		}),
		(e) => /409: lease_lost/.test(e.message) && /Do not repeat/.test(e.description),
	);
});

test('fail passes the destination status so idem classifies', async () => {
	const { out, requests } = await run({
		items: [{ statusCode: 503, headers: { 'retry-after': '30' } }],
		params: {
			operation: 'fail', namespace: 'shop', key: 'k', leaseToken: 'T', kind: 'auto',
			httpStatus: '503', category: 'auto', sent: 'unknown', message: '', retryAfter: '30',
		},
		respond: () => ({ statusCode: 200, body: { state: 'failed_retryable', class: 'retryable', retry: { allowed: true, attempt: 1, max_attempts: 5 }, record: record('failed_retryable') } }),
	});
	assert.deepEqual(requests[0].body, { token: 'T', http_status: 503, retry_after: '30', error: { category: 'http', message: 'HTTP 503' } });
	assert.equal(out[0][0].json.idem.class, 'retryable');
	assert.equal(out[0][0].json.idem.retry.allowed, true);
});

test('fail reads the n8n error item when no status is given', async () => {
	const { requests } = await run({
		items: [{ error: { message: 'connect ECONNREFUSED 10.0.0.1:443', code: 'ECONNREFUSED' } }],
		params: {
			operation: 'fail', namespace: 'shop', key: 'k', leaseToken: 'T', kind: 'auto',
			httpStatus: '', category: 'auto', sent: 'unknown', message: '', retryAfter: '',
		},
		respond: () => ({ statusCode: 200, body: { state: 'failed_retryable', class: 'retryable' } }),
	});
	assert.deepEqual(requests[0].body, {
		token: 'T', sent: false, error: { category: 'connection', message: 'connect ECONNREFUSED 10.0.0.1:443' },
	});
});

test('prepare saves the payload with approval', async () => {
	const { requests, out } = await run({
		items: [{ draft: 'Hello' }],
		params: { operation: 'prepare', namespace: 'crm', key: 'order-847:draft-followup:v1', leaseToken: 'T', preparedPayload: { text: 'Hello' }, approvalRequired: true },
		respond: () => ({ statusCode: 200, body: { state: 'awaiting_approval', record: record('awaiting_approval') } }),
	});
	assert.equal(requests[0].url, 'http://127.0.0.1:7780/v1/namespaces/crm/keys/order-847%3Adraft-followup%3Av1/prepare');
	assert.deepEqual(requests[0].body, { token: 'T', payload: { text: 'Hello' }, approval_required: true });
	assert.equal(out[0][0].json.idem.state, 'awaiting_approval');
});

test('bad credential URL is refused before any request', async () => {
	await assert.rejects(
		run({ items: [{}], credentials: { baseUrl: 'idem:7780', token: '' }, params: claimParams(), respond: () => assert.fail() }),
		/Base URL "idem:7780" is not an http\(s\) URL/,
	);
});

test('description: claim has five named outputs, other operations one', () => {
	const d = new IdempotencyGate().description;
	assert.equal(d.name, 'idempotencyGate');
	assert.equal(d.displayName, 'Idempotency Gate');
	const fn = d.outputs.slice(3, -2); // strip "={{" and "}}"
	const evalOutputs = new Function('$parameter', `return ${fn};`);
	assert.deepEqual(evalOutputs({ operation: 'claim' }).map((o) => o.displayName), ['Proceed', 'Duplicate', 'Busy', 'Needs Review', 'Blocked']);
	assert.deepEqual(evalOutputs({}).length, 5, 'claim is the default operation');
	assert.deepEqual(evalOutputs({ operation: 'complete' }), [{ type: 'main' }]);
	assert.deepEqual(
		evalOutputs({ operation: 'effect' }).map((o) => o.displayName),
		['Performed', 'Duplicate', 'Failed', 'Retry Later', 'Needs Review', 'Blocked'],
	);
	assert.deepEqual(d.credentials, [{ name: 'idemApi', required: true }]);
});

const effectParams = (over = {}) => ({
	operation: 'effect',
	namespace: 'shop',
	key: (i) => `evt_${i}:charge`,
	effectMethod: 'POST',
	effectUrl: 'https://api.example.com/charges',
	effectHeaders: { header: [{ name: 'Authorization', value: 'Bearer sk_live_secret' }] },
	effectBodyMode: 'json',
	effectJson: (i) => ({ amount: 100 + i }),
	effectOptions: { timeoutMs: 5000 },
	...over,
});

test('effect builds the request to idem: URL, body in the contract shape, a timeout that covers the call', async () => {
	const { out, requests } = await run({
		items: [{ body: { id: 'evt_0' } }],
		params: effectParams(),
		respond: () => ({ statusCode: 200, body: { outcome: 'performed', response: { status: 201, headers: {}, body: { id: 'ch_1' }, truncated: false }, record: record('completed') } }),
	});
	assert.equal(requests.length, 1);
	const r = requests[0];
	assert.equal(r.method, 'POST');
	assert.equal(r.url, 'http://127.0.0.1:7780/v1/namespaces/shop/keys/evt_0%3Acharge/effect');
	assert.deepEqual(r.body, {
		request: { method: 'POST', url: 'https://api.example.com/charges', headers: { Authorization: 'Bearer sk_live_secret' }, body: { amount: 100 } },
		timeout_ms: 5000,
		owner: '42',
	});
	assert.equal(r.ignoreHttpStatusErrors, true);
	assert.ok(r.timeout >= 15000, `timeout ${r.timeout} covers the effect's own 5 s`);
	assert.equal(out.length, 6);
	assert.equal(out[0].length, 1);
	assert.deepEqual(out[0][0].json.idem.response.body, { id: 'ch_1' });
	assert.equal(out[0][0].json.idem.outcome, 'performed');
	assert.deepEqual(out[0][0].json.body, { id: 'evt_0' }, 'the input item is kept');
});

test('effect routes each outcome to its output; a replay says so', async () => {
	const answers = [
		[200, 'performed', 0],
		[200, 'completed', 1],
		[200, 'failed_permanent', 2],
		[409, 'backoff', 3],
		[409, 'in_flight', 3],
		[503, 'paused', 3],
		[409, 'needs_review', 4],
		[422, 'conflict', 5],
	];
	const { out } = await run({
		items: answers.map(() => ({})),
		params: effectParams(),
		respond: (_req, n) => ({
			statusCode: answers[n][0],
			headers: answers[n][1] === 'completed' ? { 'idempotent-replayed': 'true' } : {},
			body: { outcome: answers[n][1], response: null, record: record('processing'), ...(answers[n][1] === 'backoff' ? { retry_after_ms: 1500 } : {}) },
		}),
	});
	answers.forEach(([status, outcome, o], i) => {
		const hit = out[o].find((it) => it.pairedItem.item === i);
		assert.ok(hit, `${outcome} lands on output ${o}`);
		assert.equal(hit.json.idem.outcome, outcome);
		assert.equal(hit.json.idem.status, status);
	});
	assert.equal(out[1][0].json.idem.replayed, true);
	assert.equal(out[3].find((it) => it.json.idem.outcome === 'backoff').json.idem.retry_after_ms, 1500);
});

test('effect: a refusal without outcome (egress, validation) is an error naming the field; unreachable idem with Continue On Fail goes to Retry Later', async () => {
	await assert.rejects(
		run({
			items: [{}],
			params: effectParams(),
			respond: () => ({ statusCode: 422, body: { code: 'destination_forbidden', detail: 'request.url: loopback address refused' } }),
		}),
		/destination_forbidden: request.url/,
	);
	const { out } = await run({
		items: [{}],
		params: effectParams(),
		continueOnFail: true,
		respond: () => {
			throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
		},
	});
	assert.equal(out[3].length, 1, 'Retry Later');
	assert.equal(out[0].length + out[1].length, 0, 'never Performed or Duplicate');
});

test('effect: a bad method or URL fails before anything is sent to idem', async () => {
	const { requests, ctx } = (() => {
		const h = require('./helpers');
		return h.makeContext({ items: [{}], params: effectParams({ effectUrl: 'file:///etc/passwd' }), respond: () => ({ statusCode: 200, body: {} }) });
	})();
	await assert.rejects(new IdempotencyGate().execute.call(ctx), /not an http\(s\) URL/);
	assert.equal(requests.length, 0);
});

test('complete and fail send the optional cost of the attempt', async () => {
	const { requests } = await run({
		items: [{ usage: { total_tokens: 1536 } }],
		params: {
			operation: 'complete', namespace: 'ai', key: 'draft-1', leaseToken: 'T1', sendResult: false,
			externalRef: '', costUnits: (i) => 1536, costUsd: '0.0123',
		},
		respond: () => ({ statusCode: 200, body: { state: 'completed', record: record('completed') } }),
	});
	assert.deepEqual(requests[0].body, { token: 'T1', cost: { tokens: 1536, usd: 0.0123 } });
	const failed = await run({
		items: [{}],
		params: {
			operation: 'fail', namespace: 'ai', key: 'draft-1', leaseToken: 'T', kind: 'retryable',
			httpStatus: '', category: 'timeout', sent: 'unknown', message: 'slow model', retryAfter: '',
			costUnits: '400', costUsd: '',
		},
		respond: () => ({ statusCode: 200, body: { state: 'failed_retryable', class: 'retryable' } }),
	});
	assert.deepEqual(failed.requests[0].body.cost, { tokens: 400 });
	// Not given: no cost member at all (older servers refuse unknown members).
	const plain = await run({
		items: [{}],
		params: { operation: 'complete', namespace: 'ai', key: 'k', leaseToken: 'T', sendResult: false },
		respond: () => ({ statusCode: 200, body: { state: 'completed', record: record('completed') } }),
	});
	assert.equal('cost' in plain.requests[0].body, false);
	// A wrong expression fails on this node, before anything is sent.
	await assert.rejects(
		run({
			items: [{}],
			params: { operation: 'complete', namespace: 'ai', key: 'k', leaseToken: 'T', sendResult: false, costUnits: '-3' },
			respond: () => assert.fail('must not send'),
		}),
		/Cost Tokens/,
	);
});

test('a fenced completion explains what it means on the canvas', async () => {
	await assert.rejects(
		run({
			items: [{}],
			params: { operation: 'complete', namespace: 'shop', key: 'k', leaseToken: 'old', sendResult: false },
			respond: () => ({ statusCode: 409, body: { code: 'lease_lost', detail: 'the lease was lost' } }),
		}),
		(e) => /fenced completion/.test(e.description) && /happened twice/.test(e.description),
	);
	await assert.rejects(
		run({
			items: [{}],
			params: {
				operation: 'fail', namespace: 'shop', key: 'k', leaseToken: 'old', kind: 'retryable',
				httpStatus: '', category: 'connection', sent: 'no', message: '', retryAfter: '',
			},
			respond: () => ({ statusCode: 409, body: { code: 'lease_lost', detail: 'the lease was lost' } }),
		}),
		(e) => !/fenced completion/.test(e.description) && /Do not repeat/.test(e.description),
	);
});

test('single output: every claim answer on one output with idem.route and idem.summary; only acquired is proceed', async () => {
	const answers = [
		[201, { outcome: 'acquired', token: 'T', resumed: false, record: record('processing') }],
		[200, { outcome: 'completed', record: record('completed') }],
		[409, { outcome: 'in_flight', retry_after_ms: 900, record: record('processing') }],
		[409, { outcome: 'needs_review', record: record('needs_review') }],
		[422, { outcome: 'conflict', record: record('processing') }],
	];
	const { out } = await run({
		items: answers.map((_, i) => ({ body: { id: `evt_${i}` } })),
		params: claimParams({ outputMode: 'single' }),
		respond: (_req, n) => ({ statusCode: answers[n][0], body: answers[n][1] }),
	});
	assert.equal(out.length, 1);
	assert.deepEqual(out[0].map((it) => it.json.idem.route), ['proceed', 'duplicate', 'busy', 'needs_review', 'blocked']);
	assert.deepEqual(out[0].map((it) => it.pairedItem.item), [0, 1, 2, 3, 4]);
	assert.equal(out[0][0].json.idem.token, 'T');
	assert.match(out[0][1].json.idem.summary, /Do not do it again/);
	assert.equal(out[0][2].json.idem.retry_after_ms, 900);
});

test('as an AI agent tool (the ...Tool node type) the node answers on one output whatever Output Mode says', async () => {
	const { out, requests } = await run({
		nodeType: 'n8n-nodes-idem.idempotencyGateTool',
		items: [{ order_id: 'o_1' }],
		params: effectParams({ key: 'refund:o_1', outputMode: 'routes' }),
		respond: () => ({
			statusCode: 200,
			headers: { 'idempotent-replayed': 'true' },
			body: { outcome: 'completed', response: { status: 201, headers: {}, body: { id: 're_1' }, truncated: false }, record: record('completed') },
		}),
	});
	assert.equal(requests[0].url, 'http://127.0.0.1:7780/v1/namespaces/shop/keys/refund%3Ao_1/effect');
	assert.equal(out.length, 1, 'n8n hands only the first output to the agent');
	const idem = out[0][0].json.idem;
	assert.equal(idem.route, 'duplicate');
	assert.equal(idem.replayed, true);
	assert.deepEqual(idem.response.body, { id: 're_1' });
	assert.match(idem.summary, /nothing was sent again/);
});

test('single output with Continue On Fail: an unreachable idem is "busy", never "proceed"', async () => {
	const { out } = await run({
		items: [{}],
		params: claimParams({ outputMode: 'single', key: 'k1' }),
		continueOnFail: true,
		respond: () => {
			throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:7780'), { code: 'ECONNREFUSED' });
		},
	});
	assert.equal(out.length, 1);
	assert.equal(out[0][0].json.idem.route, 'busy');
	assert.match(out[0][0].json.error, /Could not reach idem/);
});

test('an error wrapped by n8n (transport code in the cause) still names the socket code', async () => {
	const cause = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:7780'), { code: 'ECONNREFUSED' });
	await assert.rejects(
		run({
			items: [{}],
			params: claimParams({ key: 'k1' }),
			respond: () => {
				throw Object.assign(new Error('The service refused the connection - perhaps it is offline'), { cause });
			},
		}),
		(e) => /Could not reach idem/.test(e.message) && /ECONNREFUSED/.test(e.description),
	);
});

const deriveParams = (over = {}) => ({
	resource: 'event',
	operation: 'deriveKey',
	deriveEvent: '={{ $json.body }}',
	deriveFields: '/data/object/id',
	deriveOptions: { suffix: 'crm' },
	...over,
});

test('derive key: POST /v1/keys/derive with the event; the key comes back as idem.key on one output', async () => {
	const { out, requests } = await run({
		items: [{ body: { data: { object: { id: 'cs_1' } } } }],
		params: deriveParams({ deriveEvent: (i) => ({ data: { object: { id: `cs_${i + 1}` } } }) }),
		respond: () => ({ statusCode: 200, body: { key: 'cs_1:crm' } }),
	});
	assert.equal(requests[0].method, 'POST');
	assert.equal(requests[0].url, 'http://127.0.0.1:7780/v1/keys/derive');
	assert.deepEqual(requests[0].body, { event: { data: { object: { id: 'cs_1' } } }, fields: ['/data/object/id'], suffix: 'crm' });
	assert.equal(requests[0].headers.Authorization, 'Bearer tok_secret');
	assert.equal(out.length, 1);
	assert.equal(out[0][0].json.idem.key, 'cs_1:crm');
	assert.deepEqual(out[0][0].json.body, { data: { object: { id: 'cs_1' } } }, 'the input item is kept');
});

test('derive key: a missing identity field is an error, never an empty key', async () => {
	await assert.rejects(
		run({
			items: [{}],
			params: deriveParams({ deriveEvent: { data: {} } }),
			respond: () => ({ statusCode: 422, body: { code: 'missing_identity_field', detail: '/data/object/id is missing' } }),
		}),
		/idem answered 422: missing_identity_field: \/data\/object\/id is missing/,
	);
	const { ctx, requests } = require('./helpers').makeContext({
		items: [{}],
		params: deriveParams({ deriveEvent: { id: 1 }, deriveFields: 'id' }),
		respond: () => assert.fail('must not send'),
	});
	await assert.rejects(new IdempotencyGate().execute.call(ctx), /not a JSON pointer/);
	assert.equal(requests.length, 0);
});

test('description: usable as a tool, resources Key (default) and Event, outputs follow Output Mode', () => {
	const d = new IdempotencyGate().description;
	assert.equal(d.usableAsTool, true);
	const resource = d.properties.find((p) => p.name === 'resource');
	assert.equal(resource.default, 'key');
	const ops = d.properties.filter((p) => p.name === 'operation').flatMap((p) => p.options.map((o) => o.name));
	assert.deepEqual(ops.sort(), ['Claim', 'Complete', 'Derive Key', 'Effect', 'Fail', 'Prepare']);
	const evalOutputs = new Function('$parameter', `return ${d.outputs.slice(3, -2)};`);
	assert.equal(evalOutputs({ operation: 'claim', outputMode: 'single' }).length, 1);
	assert.equal(evalOutputs({ operation: 'effect', outputMode: 'single' }).length, 1);
	assert.equal(evalOutputs({ resource: 'key', operation: 'claim', outputMode: 'routes' }).length, 5);
	assert.deepEqual(evalOutputs({ resource: 'event', operation: 'deriveKey' }), [{ type: 'main' }]);
});

test('credential: tested with GET /v1/whoami (any valid token, whatever its scope); documented', () => {
	const { IdemApi } = require('../dist/credentials/IdemApi.credentials.js');
	const c = new IdemApi();
	assert.equal(c.test.request.method, 'GET');
	assert.equal(c.test.request.url, '/v1/whoami');
	assert.match(c.documentationUrl, /^https:\/\//);
	assert.ok(c.properties.find((p) => p.name === 'token').typeOptions.password);
});

test('codex file: names this node and links its documentation', () => {
	const codex = require('../dist/nodes/IdempotencyGate/IdempotencyGate.node.json');
	const pkg = require('../package.json');
	assert.equal(codex.node, `${pkg.name}.${new IdempotencyGate().description.name}`);
	assert.match(codex.resources.primaryDocumentation[0].url, /^https:\/\//);
	assert.match(codex.resources.credentialDocumentation[0].url, /^https:\/\//);
	for (const p of [...pkg.n8n.nodes, ...pkg.n8n.credentials]) {
		assert.ok(require('node:fs').existsSync(require('node:path').join(__dirname, '..', p)), p);
	}
});
