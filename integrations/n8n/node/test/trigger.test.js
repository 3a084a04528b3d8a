// The Idem Intake Trigger: the forward's signature check (pure) and the webhook method (with a
// stubbed IWebhookFunctions). Forwards are signed here the way idem signs them and, for one
// case, with the reference algorithm written out independently (HMAC over "id.ts.body").
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fwd = require('../dist/nodes/IdemIntakeTrigger/forward.js');
const { IdemIntakeTrigger } = require('../dist/nodes/IdemIntakeTrigger/IdemIntakeTrigger.node.js');

const SECRET = `whsec_${crypto.randomBytes(32).toString('base64')}`;
const OTHER = `whsec_${crypto.randomBytes(32).toString('base64')}`;
const NOW = 1796400000;
const BODY = Buffer.from('{"id":"evt_1","type":"invoice.paid","amount":4200}');

function signed({ id = 'evt_1', ts = NOW, body = BODY, secret = SECRET, key = id, attempt = '1', extra = {} } = {}) {
	return {
		'webhook-id': id,
		'webhook-timestamp': String(ts),
		'webhook-signature': `v1,${fwd.sign(secret, id, ts, body)}`,
		'idem-key': key,
		'idem-event-id': 'evt_1',
		'idem-attempt': attempt,
		'idem-source': 'stripe',
		'idem-received-at': '2026-12-04T23:00:00.000Z',
		'content-type': 'application/json',
		...extra,
	};
}

test('a forward signed with the secret is accepted and its event read from the headers', () => {
	const v = fwd.verifyForward(signed(), BODY, [SECRET], NOW);
	assert.equal(v.ok, true);
	assert.deepEqual(v.event, {
		key: 'evt_1',
		eventId: 'evt_1',
		attempt: 1,
		source: 'stripe',
		receivedAt: '2026-12-04T23:00:00.000Z',
		timestamp: NOW,
	});
});

test('the signature is the Standard Webhooks one: base64 HMAC-SHA256 of "id.ts.body" with the decoded whsec_ key', () => {
	const key = Buffer.from(SECRET.slice('whsec_'.length), 'base64');
	const mac = crypto.createHmac('sha256', key).update(`evt_1.${NOW}.${BODY.toString()}`).digest('base64');
	const headers = { ...signed(), 'webhook-signature': `v1a,bogus v1,${mac}` };
	assert.equal(fwd.verifyForward(headers, BODY, [SECRET], NOW).ok, true);
});

test('a forgery is refused: another secret, a changed body, no signature, a non-v1 scheme', () => {
	assert.match(fwd.verifyForward(signed({ secret: OTHER }), BODY, [SECRET], NOW).reason, /no v1 signature matches/);
	const changed = Buffer.from(BODY.toString().replace('4200', '4201'));
	assert.equal(fwd.verifyForward(signed(), changed, [SECRET], NOW).ok, false);
	const bare = signed();
	delete bare['webhook-signature'];
	assert.match(fwd.verifyForward(bare, BODY, [SECRET], NOW).reason, /missing/);
	const v2 = { ...signed(), 'webhook-signature': signed()['webhook-signature'].replace('v1,', 'v2,') };
	assert.equal(fwd.verifyForward(v2, BODY, [SECRET], NOW).ok, false);
	assert.match(fwd.verifyForward(signed(), BODY, [], NOW).reason, /no usable forward secret/);
	assert.match(fwd.verifyForward(signed(), BODY, ['not base64!'], NOW).reason, /no usable/);
});

test('during a rotation either secret verifies', () => {
	assert.equal(fwd.verifyForward(signed({ secret: OTHER }), BODY, [SECRET, OTHER], NOW).ok, true);
});

test('tolerance: a timestamp too far from the clock is refused, either way; inside it is accepted', () => {
	assert.equal(fwd.verifyForward(signed({ ts: NOW - 300 }), BODY, [SECRET], NOW).ok, true);
	assert.match(fwd.verifyForward(signed({ ts: NOW - 301 }), BODY, [SECRET], NOW).reason, /300 s/);
	assert.equal(fwd.verifyForward(signed({ ts: NOW + 301 }), BODY, [SECRET], NOW).ok, false);
	assert.equal(fwd.verifyForward(signed({ ts: NOW - 50 }), BODY, [SECRET], NOW, 30).ok, false);
	const ms = { ...signed(), 'webhook-timestamp': `${NOW}000` };
	assert.match(fwd.verifyForward(ms, BODY, [SECRET], NOW).reason, /300 s|unix seconds/);
	const junk = { ...signed(), 'webhook-timestamp': '12a' };
	assert.match(fwd.verifyForward(junk, BODY, [SECRET], NOW).reason, /unix seconds/);
});

test('key/id mismatch: an Idem-Key other than the signed webhook-id is refused', () => {
	const h = signed({ key: 'evt_2' });
	assert.match(fwd.verifyForward(h, BODY, [SECRET], NOW).reason, /Idem-Key is not the signed webhook-id/);
});

test('a replayed attempt: idem retrying (attempt 2, fresh signature) passes with its attempt; a captured forward sent again later is refused', () => {
	const retry = fwd.verifyForward(signed({ attempt: '2', ts: NOW + 60 }), BODY, [SECRET], NOW + 60);
	assert.equal(retry.ok, true);
	assert.equal(retry.event.attempt, 2);
	assert.equal(retry.event.key, 'evt_1');
	const captured = signed();
	assert.equal(fwd.verifyForward(captured, BODY, [SECRET], NOW + 3600).ok, false);
	assert.equal(fwd.verifyForward(signed({ attempt: '0' }), BODY, [SECRET], NOW).ok, false);
	assert.equal(fwd.verifyForward(signed({ attempt: 'x' }), BODY, [SECRET], NOW).ok, false);
});

function hookContext({ headers, body, forwardSecret = SECRET, options = {} }) {
	const sent = {};
	const req = { headers, rawBody: undefined, readRawBody: async () => (req.rawBody = body) };
	const res = {
		status(code) {
			sent.status = code;
			return res;
		},
		json(data) {
			sent.body = data;
			return res;
		},
	};
	return {
		sent,
		ctx: {
			getRequestObject: () => req,
			getResponseObject: () => res,
			getCredentials: async (name) => {
				assert.equal(name, 'idemApi');
				return { baseUrl: 'http://127.0.0.1:7780', token: 't', forwardSecret };
			},
			getNodeParameter: (name, fallback) => (name === 'options' ? options : fallback),
		},
	};
}

test('webhook: a forgery is answered 401 here and starts no execution', async () => {
	const realNow = Date.now;
	Date.now = () => NOW * 1000;
	try {
		const { ctx, sent } = hookContext({ headers: signed({ secret: OTHER }), body: BODY });
		const out = await new IdemIntakeTrigger().webhook.call(ctx);
		assert.deepEqual(out, { noWebhookResponse: true });
		assert.equal(out.workflowData, undefined);
		assert.equal(sent.status, 401);
		assert.equal(sent.body.code, 'invalid_signature');
	} finally {
		Date.now = realNow;
	}
});

test('webhook: a verified forward starts one execution with body, key, event id, attempt and source', async () => {
	const realNow = Date.now;
	Date.now = () => NOW * 1000;
	try {
		const { ctx, sent } = hookContext({ headers: signed({ attempt: '3' }), body: BODY, forwardSecret: `${OTHER} ${SECRET}` });
		const out = await new IdemIntakeTrigger().webhook.call(ctx);
		assert.equal(sent.status, undefined, 'n8n answers (per the Respond setting), not the node');
		assert.equal(out.workflowData.length, 1);
		assert.equal(out.workflowData[0].length, 1);
		assert.deepEqual(out.workflowData[0][0].json, {
			body: { id: 'evt_1', type: 'invoice.paid', amount: 4200 },
			key: 'evt_1',
			eventId: 'evt_1',
			attempt: 3,
			source: 'stripe',
			receivedAt: '2026-12-04T23:00:00.000Z',
		});
	} finally {
		Date.now = realNow;
	}
});

test('the node answers from the last node or a Respond node, never immediately', () => {
	const d = new IdemIntakeTrigger().description;
	const respond = d.properties.find((p) => p.name === 'respond');
	assert.deepEqual(
		respond.options.map((o) => o.value),
		['lastNode', 'responseNode'],
	);
	assert.equal(respond.default, 'lastNode');
	assert.equal(d.webhooks[0].responseMode, '={{$parameter["respond"]}}');
	assert.equal(d.webhooks[0].isFullPath, true, 'the production URL is /webhook/<path>');
	// A run that ends on a branch with no items (a Duplicate claim) must still answer 2xx.
	assert.equal(d.webhooks[0].responseData, 'noData');
	assert.deepEqual(d.inputs, []);
});
