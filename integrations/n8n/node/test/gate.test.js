const test = require('node:test');
const assert = require('node:assert/strict');
const gate = require('../dist/nodes/IdempotencyGate/gate.js');

test('only acquired proceeds; every other outcome goes to a path that does not run the effect', () => {
	assert.equal(gate.outputForOutcome('acquired'), gate.OUTPUT.proceed);
	assert.equal(gate.outputForOutcome('completed'), gate.OUTPUT.duplicate);
	for (const o of ['in_flight', 'backoff', 'awaiting_approval', 'paused', 'limited']) {
		assert.equal(gate.outputForOutcome(o), gate.OUTPUT.busy, o);
	}
	assert.equal(gate.outputForOutcome('needs_review'), gate.OUTPUT.needsReview);
	assert.equal(gate.outputForOutcome('conflict'), gate.OUTPUT.blocked);
	assert.equal(gate.outputForOutcome('failed_permanent'), gate.OUTPUT.blocked);
	assert.equal(gate.outputForOutcome('something_new'), undefined);
	assert.deepEqual(gate.CLAIM_OUTPUT_NAMES, ['Proceed', 'Duplicate', 'Busy', 'Needs Review', 'Blocked']);
});

test('key URL percent-encodes namespace and key and drops trailing slashes of the base', () => {
	assert.equal(
		gate.keyUrl({ baseUrl: 'http://h:1//', namespace: 'shop', key: 'evt_1:crm/x?y#z' }, 'claim'),
		'http://h:1/v1/namespaces/shop/keys/evt_1%3Acrm%2Fx%3Fy%23z/claim',
	);
});

test('key validation follows the server rule (1-255 bytes of visible ASCII)', () => {
	assert.equal(gate.keyProblem('evt_123:charge'), undefined);
	assert.equal(gate.keyProblem(12345), undefined);
	assert.match(gate.keyProblem(undefined), /undefined/);
	assert.match(gate.keyProblem(null), /null/);
	assert.match(gate.keyProblem(''), /empty/);
	assert.match(gate.keyProblem('has space'), /position 3/);
	assert.match(gate.keyProblem('x'.repeat(256)), /256 bytes/);
	assert.equal(gate.keyProblem('x'.repeat(255)), undefined);
	assert.match(gate.namespaceProblem('bad ns'), /found " "/);
	assert.equal(gate.namespaceProblem('shop.prod:eu-1'), undefined);
});

test('claim body: payload, precomputed fingerprint or none; never both', () => {
	assert.deepEqual(gate.claimBody({ fingerprintMode: 'payload', payload: '{"a":1}', owner: '7' }), {
		payload: { a: 1 },
		owner: '7',
	});
	const fp = 'A'.repeat(64);
	assert.deepEqual(gate.claimBody({ fingerprintMode: 'fingerprint', fingerprint: fp }), {
		fingerprint: 'a'.repeat(64),
	});
	assert.deepEqual(
		gate.claimBody({ fingerprintMode: 'none', payload: { a: 1 }, leaseMs: 5000, waitMs: 100, leaseExpiry: 'review', correlationId: 'c' }),
		{ lease_ms: 5000, wait_ms: 100, lease_expiry: 'review', correlation_id: 'c' },
	);
	assert.throws(() => gate.claimBody({ fingerprintMode: 'payload', payload: '' }), /Payload is empty/);
	assert.throws(() => gate.claimBody({ fingerprintMode: 'payload', payload: '{nope' }), /not valid JSON/);
	assert.throws(() => gate.claimBody({ fingerprintMode: 'fingerprint', fingerprint: 'abc' }), /64 hex/);
});

test('complete and prepare bodies carry the token', () => {
	assert.deepEqual(gate.completeBody('t', { id: 'c_1' }, 'c_1'), { token: 't', result: { id: 'c_1' }, external_ref: 'c_1' });
	assert.deepEqual(gate.completeBody('t', undefined, ''), { token: 't' });
	assert.deepEqual(gate.prepareBody('t', { text: 'hi' }, true), { token: 't', payload: { text: 'hi' }, approval_required: true });
	assert.deepEqual(gate.prepareBody('t', { text: 'hi' }, false), { token: 't', payload: { text: 'hi' } });
	assert.throws(() => gate.requireToken('', 'complete'), /No lease token for complete/);
});

test('fail body: the HTTP status goes to idem, which classifies', () => {
	const b = gate.failBody('t', { kind: 'auto', httpStatus: '503', category: 'auto', sent: 'unknown', retryAfter: '120' });
	assert.deepEqual(b, { token: 't', http_status: 503, retry_after: '120', error: { category: 'http', message: 'HTTP 503' } });
});

test('fail body: status from an n8n error item (httpCode)', () => {
	const b = gate.failBody('t', {
		kind: 'auto', httpStatus: '', category: 'auto', sent: 'unknown',
		error: { message: 'Bad gateway - the service failed', httpCode: '502' },
	});
	assert.equal(b.http_status, 502);
	assert.equal(b.kind, undefined);
	assert.equal(b.error.message, 'Bad gateway - the service failed');
});

test('fail body: connection refused never left, timeouts are ambiguous, unknown is ambiguous', () => {
	const refused = gate.failBody('t', { kind: 'auto', category: 'auto', sent: 'unknown', error: { message: 'connect ECONNREFUSED 127.0.0.1:9' } });
	assert.deepEqual(refused.error.category, 'connection');
	assert.equal(refused.sent, false);
	assert.equal(refused.kind, undefined);
	const timeout = gate.failBody('t', { kind: 'auto', category: 'auto', sent: 'unknown', error: { message: 'timeout of 5000ms exceeded' } });
	assert.equal(timeout.error.category, 'timeout');
	assert.equal(timeout.sent, undefined);
	const unknown = gate.failBody('t', { kind: 'auto', category: 'auto', sent: 'unknown', error: { message: 'weird' } });
	assert.equal(unknown.kind, 'ambiguous');
	const explicit = gate.failBody('t', { kind: 'permanent', category: 'business', sent: 'no', message: 'card declined' });
	assert.deepEqual(explicit, { token: 't', kind: 'permanent', sent: false, error: { category: 'business', message: 'card declined' } });
	assert.throws(() => gate.failBody('t', { kind: 'auto', httpStatus: 'abc', category: 'auto', sent: 'unknown' }), /not an HTTP status/);
});

test('problem+json is described with its code and detail', () => {
	assert.equal(gate.describeProblem(400, { code: 'invalid_key', detail: 'key may only…' }), 'idem answered 400: invalid_key: key may only…');
	assert.equal(gate.describeProblem(502, '<html>'), 'idem answered 502: <html>');
	assert.deepEqual(gate.parseBody('{"a":1}'), { a: 1 });
	assert.deepEqual(gate.parseBody(Buffer.from('{"a":1}')), { a: 1 });
});

test("fail body: n8n's rewritten socket messages are recognised", () => {
	const refused = gate.failBody('t', { kind: 'auto', category: 'auto', sent: 'unknown', error: { message: 'The service refused the connection - perhaps it is offline' } });
	assert.equal(refused.sent, false);
	assert.equal(refused.error.category, 'connection');
	const reset = gate.failBody('t', { kind: 'auto', category: 'auto', sent: 'unknown', error: { message: 'The connection to the server was closed unexpectedly, perhaps it is offline.' } });
	assert.equal(reset.error.category, 'connection');
	assert.equal(reset.sent, undefined, 'a reset may have happened after the request arrived');
	const t = gate.failBody('t', { kind: 'auto', category: 'auto', sent: 'unknown', error: { message: "The connection timed out, consider setting the 'Retry on Fail' option" } });
	assert.equal(t.error.category, 'timeout');
});

test('effect: every outcome has an output; none is unknown-but-routed', () => {
	const E = gate.EFFECT_OUTPUT;
	assert.equal(gate.effectOutputForOutcome('performed'), E.performed);
	assert.equal(gate.effectOutputForOutcome('completed'), E.duplicate);
	assert.equal(gate.effectOutputForOutcome('failed_permanent'), E.failed);
	for (const o of ['backoff', 'in_flight', 'awaiting_approval', 'paused', 'limited']) {
		assert.equal(gate.effectOutputForOutcome(o), E.retryLater, o);
	}
	assert.equal(gate.effectOutputForOutcome('needs_review'), E.needsReview);
	assert.equal(gate.effectOutputForOutcome('conflict'), E.blocked);
	assert.equal(gate.effectOutputForOutcome('acquired'), undefined, 'an effect never hands out a lease');
	assert.equal(gate.effectOutputForOutcome('something_new'), undefined);
	assert.deepEqual(gate.EFFECT_OUTPUT_NAMES, ['Performed', 'Duplicate', 'Failed', 'Retry Later', 'Needs Review', 'Blocked']);
});

test('effect body: request, headers, JSON or text body, options in the contract names', () => {
	assert.deepEqual(
		gate.effectBody({
			method: 'post',
			url: 'https://api.example.com/charges',
			headers: [{ name: 'Authorization', value: 'Bearer sk' }, { name: '', value: 'ignored' }],
			bodyMode: 'json',
			body: '{"amount":100}',
			owner: '42',
		}),
		{
			request: { method: 'POST', url: 'https://api.example.com/charges', headers: { Authorization: 'Bearer sk' }, body: { amount: 100 } },
			owner: '42',
		},
	);
	assert.deepEqual(
		gate.effectBody({
			method: 'PUT',
			url: 'http://h/x',
			bodyMode: 'text',
			bodyText: 'a=1&b=2',
			idempotencyHeader: 'X-Request-Key',
			timeoutMs: 5000,
			success: '200, 201',
			destinationIdempotent: 'yes',
			reconcileUrl: 'http://h/by-ref/{key}',
			reconcileFound: '',
			reconcileNotFound: '404,410',
			correlationId: 'c-1',
			waitMs: 200,
		}),
		{
			request: { method: 'PUT', url: 'http://h/x', body_text: 'a=1&b=2' },
			idempotency_header: 'X-Request-Key',
			timeout_ms: 5000,
			success: [200, 201],
			destination_idempotent: true,
			reconcile: { method: 'GET', url: 'http://h/by-ref/{key}', found: [200], not_found: [404, 410] },
			correlation_id: 'c-1',
			wait_ms: 200,
		},
	);
	assert.deepEqual(
		gate.effectBody({ method: 'DELETE', url: 'https://h/x/1', bodyMode: 'none', body: { a: 1 }, sendIdempotencyHeader: false, success: '2XX', destinationIdempotent: 'no' }),
		{ request: { method: 'DELETE', url: 'https://h/x/1' }, idempotency_header: null, success: '2xx', destination_idempotent: false },
	);
});

test('effect body: what can be checked before anything is claimed is refused with a reason', () => {
	const ok = { method: 'POST', url: 'https://h/x', bodyMode: 'none' };
	assert.throws(() => gate.effectBody({ ...ok, method: 'GET' }), /Method "GET" is not one of POST, PUT, PATCH, DELETE/);
	assert.throws(() => gate.effectBody({ ...ok, url: 'ftp://h/x' }), /not an http\(s\) URL/);
	assert.throws(() => gate.effectBody({ ...ok, url: '' }), /not an http\(s\) URL/);
	assert.throws(() => gate.effectBody({ ...ok, headers: [{ name: 'Bad Name', value: 'x' }] }), /not a valid HTTP header name/);
	assert.throws(
		() => gate.effectBody({ ...ok, headers: [{ name: 'X-A', value: '1' }, { name: 'x-a', value: '2' }] }),
		/given twice/,
	);
	assert.throws(() => gate.effectBody({ ...ok, success: '200, nope' }), /"nope" is not an HTTP status code/);
	assert.throws(() => gate.effectBody({ ...ok, success: ' , ' }), /Success Statuses is empty/);
	assert.throws(() => gate.effectBody({ ...ok, reconcileUrl: 'not a url' }), /Reconcile URL/);
	assert.throws(() => gate.effectBody({ ...ok, bodyMode: 'json', body: '{nope' }), /Body is not valid JSON/);
	assert.throws(() => gate.effectBody({ ...ok, idempotencyHeader: 'a b' }), /Idempotency header/);
});

test('cost: optional tokens and dollars, checked like the server checks them', () => {
	assert.equal(gate.costMember('', ''), undefined);
	assert.equal(gate.costMember(undefined, null), undefined);
	assert.deepEqual(gate.costMember('1200', ''), { tokens: 1200 });
	assert.deepEqual(gate.costMember(800, '0.0042'), { tokens: 800, usd: 0.0042 });
	assert.deepEqual(gate.costMember(' 0 ', 0), { tokens: 0, usd: 0 });
	assert.throws(() => gate.costMember('-1', ''), /Cost Tokens "-1"/);
	assert.throws(() => gate.costMember('1.5', ''), /whole number/);
	assert.throws(() => gate.costMember('lots', ''), /Cost Tokens/);
	assert.throws(() => gate.costMember('', '-0.01'), /Cost USD "-0.01"/);
	assert.throws(() => gate.costMember('', 'abc'), /non-negative number/);
	assert.deepEqual(gate.completeBody('t', undefined, '', { tokens: 5 }), { token: 't', cost: { tokens: 5 } });
	assert.deepEqual(gate.completeBody('t', undefined, '', undefined), { token: 't' });
	const f = gate.failBody('t', { kind: 'retryable', category: 'timeout', sent: 'no', cost: { usd: 0.5 } });
	assert.deepEqual(f.cost, { usd: 0.5 });
	assert.equal(gate.failBody('t', { kind: 'retryable', category: 'timeout', sent: 'no' }).cost, undefined);
});

test('derive body: event, ordered pointers, affixes; typos refused before anything is sent', () => {
	assert.deepEqual(
		gate.deriveBody({ event: '{"data":{"id":"pi_1"},"type":"x"}', fields: '/data/id,\n /type ', prefix: 'order', suffix: 'crm', hash: true }),
		{ event: { data: { id: 'pi_1' }, type: 'x' }, fields: ['/data/id', '/type'], prefix: 'order', suffix: 'crm', hash: true },
	);
	assert.deepEqual(gate.deriveBody({ event: { id: 1 }, fields: '/id' }), { event: { id: 1 }, fields: ['/id'] });
	assert.throws(() => gate.deriveBody({ event: '', fields: '/id' }), /Event is empty/);
	assert.throws(() => gate.deriveBody({ event: '{bad', fields: '/id' }), /Event is not valid JSON/);
	assert.throws(() => gate.deriveBody({ event: { id: 1 }, fields: ' , ' }), /Identity Fields is empty/);
	assert.throws(() => gate.deriveBody({ event: { id: 1 }, fields: 'id' }), /"id" is not a JSON pointer/);
	assert.throws(() => gate.deriveBody({ event: { id: 1 }, fields: '/id', prefix: 'a b' }), /Prefix may only contain visible ASCII/);
});

test('single-output routes: one per output, in output order, each with a sentence for an agent', () => {
	assert.equal(gate.CLAIM_ROUTES.length, gate.CLAIM_OUTPUT_NAMES.length);
	assert.equal(gate.EFFECT_ROUTES.length, gate.EFFECT_OUTPUT_NAMES.length);
	assert.equal(gate.CLAIM_ROUTES[gate.OUTPUT.proceed], 'proceed');
	assert.equal(gate.CLAIM_ROUTES[gate.OUTPUT.busy], 'busy');
	assert.equal(gate.EFFECT_ROUTES[gate.EFFECT_OUTPUT.retryLater], 'retry_later');
	for (const r of gate.CLAIM_ROUTES) assert.ok(gate.routeSummary('claim', r).length > 20, r);
	for (const r of gate.EFFECT_ROUTES) assert.ok(gate.routeSummary('effect', r).length > 20, r);
	// Only Proceed tells the agent to act; every other answer tells it not to.
	for (const r of gate.CLAIM_ROUTES.filter((r) => r !== 'proceed')) {
		assert.match(gate.routeSummary('claim', r), /Do not/, r);
	}
	assert.match(gate.routeSummary('effect', 'duplicate'), /nothing was sent again/);
});

test('transport detail finds the socket code also inside a wrapping error', () => {
	const raw = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:7780'), { code: 'ECONNREFUSED' });
	assert.equal(gate.transportDetail(raw), 'ECONNREFUSED connect ECONNREFUSED 127.0.0.1:7780');
	const wrapped = Object.assign(new Error('The service refused the connection - perhaps it is offline'), { cause: raw });
	assert.match(gate.transportDetail(wrapped), /refused the connection.*ECONNREFUSED/);
	assert.equal(gate.transportDetail(undefined), '');
});
