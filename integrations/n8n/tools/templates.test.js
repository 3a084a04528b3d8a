// Static checks of the generated workflow JSON: up to date, wired, no secrets, keys encoded.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { OUTPUTS } = require('./generate-templates');

test('committed templates are what the generator produces', () => {
	execFileSync(process.execPath, [path.join(__dirname, 'generate-templates.js'), '--check'], { stdio: 'pipe' });
});

for (const [file] of OUTPUTS) {
	const name = path.relative(path.join(__dirname, '..'), file);
	const wf = JSON.parse(fs.readFileSync(file, 'utf8'));
	const text = JSON.stringify(wf);

	test(`${name}: n8n workflow shape with a fixed id`, () => {
		assert.match(wf.id, /^[A-Za-z0-9]{16}$/);
		assert.ok(wf.name && Array.isArray(wf.nodes) && wf.connections);
		assert.equal(wf.active, false);
		const names = new Set(wf.nodes.map((n) => n.name));
		assert.equal(names.size, wf.nodes.length, 'node names are unique');
		for (const n of wf.nodes) {
			assert.ok(n.id && n.type && n.typeVersion && Array.isArray(n.position), n.name);
		}
		for (const [from, c] of Object.entries(wf.connections)) {
			assert.ok(names.has(from), `connection from unknown node ${from}`);
			for (const [type, outs] of Object.entries(c)) {
				assert.match(type, /^(main|ai_languageModel|ai_tool)$/, `${from}: connection type ${type}`);
				for (const out of outs) {
					for (const l of out) {
						assert.ok(names.has(l.node), `${from} → unknown ${l.node}`);
						assert.equal(l.type, type, `${from} → ${l.node}`);
					}
				}
			}
		}
	});

	test(`${name}: stock nodes only (the community-node example aside)`, () => {
		// n8n's AI nodes (Agent, chat models, MCP Client Tool) ship with n8n in @n8n/n8n-nodes-langchain.
		for (const n of wf.nodes) {
			if (name.startsWith('templates/')) assert.match(n.type, /^(n8n-nodes-base|@n8n\/n8n-nodes-langchain)\./, n.name);
			else assert.match(n.type, /^(n8n-nodes-base|n8n-nodes-idem|@n8n\/n8n-nodes-langchain)\./, n.name);
		}
	});

	test(`${name}: every idem call encodes the key, reads JSON, and uses a credential placeholder`, () => {
		const idemCalls = wf.nodes.filter(
			(n) => n.type === 'n8n-nodes-base.httpRequest' && /\/v1\/namespaces\//.test(n.parameters.url),
		);
		for (const n of idemCalls) {
			assert.match(n.parameters.url, /keys\/\{\{ encodeURIComponent\(/, n.name);
			assert.match(n.parameters.url, /namespaces\/\{\{ encodeURIComponent\(/, n.name);
			assert.equal(n.parameters.options.response.response.responseFormat, 'json', n.name);
			assert.equal(n.parameters.authentication, 'genericCredentialType', n.name);
			assert.ok(n.credentials && n.credentials.httpHeaderAuth, n.name);
			if (/\/(claim|effect)$/.test(n.parameters.url)) {
				assert.notEqual(n.retryOnFail, true, `${n.name}: never Retry On Fail on claim or effect`);
				assert.equal(n.parameters.options.response.response.neverError, true, n.name);
				assert.equal(n.parameters.options.response.response.fullResponse, true, n.name);
				assert.equal(n.onError, 'continueErrorOutput', n.name);
			}
			if (/\/complete$/.test(n.parameters.url)) assert.equal(n.retryOnFail, true, `${n.name}: complete retries`);
		}
		// Claim + complete/fail at least, or one effect (idem makes the call and records it).
		const effects = idemCalls.filter((n) => /\/effect$/.test(n.parameters.url));
		if (name.startsWith('templates/')) assert.ok(idemCalls.length >= 2 || effects.length >= 1);
		for (const n of effects) {
			assert.ok(n.parameters.options.timeout > 30000, `${n.name}: the call to idem outlasts the effect's own timeout`);
			assert.doesNotMatch(n.parameters.jsonBody, /idempotency_header: null/, `${n.name}: the key reaches the destination`);
		}
	});

	test(`${name}: no secrets, no execution id in keys, no hard-coded idem address outside the settings default`, () => {
		assert.doesNotMatch(text, /Bearer [A-Za-z0-9]/);
		for (const n of wf.nodes) {
			if (n.type === 'n8n-nodes-base.httpRequest' && /\/v1\/namespaces\//.test(n.parameters.url)) {
				assert.doesNotMatch(n.parameters.url, /127\.0\.0\.1|localhost/, n.name);
				assert.doesNotMatch(n.parameters.url, /\$execution\.id/, `${n.name}: the execution id is never a key`);
			}
		}
	});
}

// The intake template: what only it must keep ----------------------------------------------------

const vm = require('node:vm');
const crypto = require('node:crypto');

const INTAKE = path.join(__dirname, '..', 'templates', 'intake-forward-gate-effects.json');
const intake = JSON.parse(fs.readFileSync(INTAKE, 'utf8'));
const byName = (n) => intake.nodes.find((x) => x.name === n);
const VERIFY = 'Verify idem signature';

/**
 * Runs the template's own Code node the way n8n's task runner does (an async function body with
 * `this.helpers`, `$input`, `$vars`, `require` limited to the allowed built-ins, `Buffer`).
 */
async function runVerify(items, { vars = {}, nowMs = Date.now(), allowCrypto = true } = {}) {
	class FixedDate extends Date {
		static now() {
			return nowMs;
		}
	}
	const context = vm.createContext({
		Buffer,
		Date: FixedDate,
		$vars: vars,
		$input: { all: () => items },
		require: (m) => {
			if (m === 'crypto' && allowCrypto) return crypto;
			throw new Error(`Module '${m}' is disallowed`); // n8n's task runner, outside the allow list
		},
	});
	const fn = vm.runInContext(`(async function () {\n${byName(VERIFY).parameters.jsCode}\n})`, context);
	const helpers = {
		async getBinaryDataBuffer(i, prop) {
			return Buffer.from(items[i].binary[prop].data, 'base64');
		},
	};
	return fn.call({ helpers });
}

/** A forward as idem signs it (Standard Webhooks), computed here independently of the template. */
function forward({ secret, id = 'evt_1Nq:x', ts = Math.floor(Date.now() / 1000), body = '{"id":"evt_1Nq","amount":4200}', sig, headers = {} }) {
	const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
	const mac = crypto.createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64');
	return {
		json: {
			headers: {
				'idem-key': id,
				'idem-source': 'stripe',
				'idem-event-id': 'evt_1Nq',
				'idem-attempt': '2',
				'idem-received-at': '2026-06-22T10:00:00.000Z',
				'webhook-id': id,
				'webhook-timestamp': String(ts),
				'webhook-signature': sig ?? `v1,${mac}`,
				...headers,
			},
			body: JSON.parse(body),
		},
		binary: { data: { data: Buffer.from(body).toString('base64'), mimeType: 'application/json' } },
	};
}

const SECRET = `whsec_${crypto.randomBytes(32).toString('base64')}`;

test('intake template: answered 200 right after the verification, before any work, and the raw body kept', () => {
	const hooks = intake.nodes.filter((n) => n.type === 'n8n-nodes-base.webhook');
	assert.equal(hooks.length, 1);
	// Not "Respond: Immediately": an n8n that is starting can answer that and run nothing.
	assert.equal(hooks[0].parameters.responseMode, 'responseNode');
	assert.equal(hooks[0].parameters.options.rawBody, true, 'the signature covers the raw bytes');
	// Two Respond to Webhook nodes, both right after the verification: 200 on its main output,
	// 401 on its error output (n8n answers an execution that fails before any Respond node
	// with 200 and an empty body, so a refusal must be answered, not thrown).
	const responds = intake.nodes.filter((n) => n.type === 'n8n-nodes-base.respondToWebhook');
	assert.deepEqual(
		responds.map((n) => [n.name, n.parameters.options.responseCode]),
		[
			['Respond 200: received', 200],
			['Respond 401: not verified', 401],
		],
	);
	assert.equal(byName(VERIFY).onError, 'continueErrorOutput');
	const outs = (intake.connections[VERIFY]?.main ?? []).map((o) => o.map((l) => l.node));
	assert.deepEqual(outs, [['Respond 200: received'], ['Respond 401: not verified']]);
	assert.deepEqual(intake.connections['Respond 401: not verified'] ?? {}, {});
});

test('intake template: every claim is keyed on the verified key and comes after the verification', () => {
	const claims = intake.nodes.filter((n) => n.type === 'n8n-nodes-base.httpRequest' && /\/claim$/.test(n.parameters.url));
	assert.equal(claims.length, 2);
	for (const n of claims) {
		assert.match(n.parameters.url, /encodeURIComponent\(\$\('Verify idem signature'\)\.item\.json\.key \+ ':(crm|notify)'\)/, n.name);
		assert.match(n.parameters.jsonBody, /fingerprint: \$\('Verify idem signature'\)\.item\.json\.body_sha256/, n.name);
		assert.doesNotMatch(n.parameters.jsonBody, /payload:/, n.name);
	}
	// The only way from the webhook to the first claim runs through the Code node, and the Code
	// node gets the Webhook's own items (headers and raw body): a Set node before it would
	// replace them with its fields.
	const next = (from) => (intake.connections[from]?.main ?? []).flat().map((l) => l.node);
	assert.deepEqual(next('Event from idem'), [VERIFY]);
	assert.deepEqual(next(VERIFY), ['Respond 200: received', 'Respond 401: not verified']);
	assert.deepEqual(next('Respond 200: received'), ['idem settings']);
	assert.deepEqual(next('idem settings'), ['Claim crm']);
	// Every idem call's key comes from the verified key, never from an unsigned header or the body.
	for (const n of intake.nodes.filter((x) => x.type === 'n8n-nodes-base.httpRequest' && /\/v1\/namespaces\//.test(x.parameters.url))) {
		assert.doesNotMatch(n.parameters.url, /headers|\.body\./, n.name);
	}
});

test('intake template: the Code node accepts the Standard Webhooks test vector', async () => {
	// The example of the Standard Webhooks specification (and Svix's documentation).
	const item = forward({
		secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
		id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
		ts: 1614265330,
		body: '{"test": 2432232314}',
		sig: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
	});
	const out = await runVerify([item], { vars: { IDEM_FORWARD_SECRET: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' }, nowMs: 1614265330 * 1000 + 10000 });
	assert.equal(out.length, 1);
	assert.equal(out[0].json.key, 'msg_p5jXN8AQM9LWM0D4loKWxJek');
	assert.equal(out[0].json.body_sha256, crypto.createHash('sha256').update('{"test": 2432232314}').digest('hex'));
});

test('intake template: the Code node passes a signed forward on with its key and metadata', async () => {
	const out = await runVerify([forward({ secret: SECRET })], { vars: { IDEM_FORWARD_SECRET: SECRET } });
	assert.deepEqual(
		{ ...out[0].json, body_sha256: undefined },
		{
			key: 'evt_1Nq:x',
			source: 'stripe',
			event_id: 'evt_1Nq',
			attempt: 2,
			received_at: '2026-06-22T10:00:00.000Z',
			body_sha256: undefined,
			event: { id: 'evt_1Nq', amount: 4200 },
		},
	);
	assert.deepEqual(JSON.parse(JSON.stringify(out[0].pairedItem)), { item: 0 });
	// Several signatures (e.g. during a rotation): any valid v1 entry passes.
	const good = forward({ secret: SECRET }).json.headers['webhook-signature'];
	const two = forward({ secret: SECRET, sig: `v1,${Buffer.alloc(32).toString('base64')} v2,abc ${good}` });
	assert.equal((await runVerify([two], { vars: { IDEM_FORWARD_SECRET: SECRET } })).length, 1);
});

test('intake template: the Code node refuses what idem did not sign, so no effect runs', async () => {
	const vars = { IDEM_FORWARD_SECRET: SECRET };
	const refuse = (items, opts, re) => assert.rejects(runVerify(items, { vars, ...opts }), re);

	const tampered = forward({ secret: SECRET });
	tampered.binary.data.data = Buffer.from('{"id":"evt_1Nq","amount":9900}').toString('base64');
	await refuse([tampered], {}, /invalid idem forward signature/);
	await refuse([forward({ secret: `whsec_${crypto.randomBytes(32).toString('base64')}` })], {}, /invalid idem forward signature/);
	await refuse([forward({ secret: SECRET, sig: 'v2,' + forward({ secret: SECRET }).json.headers['webhook-signature'].slice(3) })], {}, /invalid idem forward signature/);
	await refuse([forward({ secret: SECRET, ts: Math.floor(Date.now() / 1000) - 301 })], {}, /more than 5 minutes off/);
	await refuse([forward({ secret: SECRET, ts: Math.floor(Date.now() / 1000) + 301 })], {}, /more than 5 minutes off/);
	await refuse([forward({ secret: SECRET, headers: { 'webhook-signature': undefined } })], {}, /not a signed forward/);
	await refuse([forward({ secret: SECRET, headers: { 'idem-key': 'evt_other' } })], {}, /Idem-Key differs/);
	const noRaw = forward({ secret: SECRET });
	delete noRaw.binary;
	await refuse([noRaw], {}, /Raw Body/);
	await refuse([forward({ secret: SECRET })], { vars: {} }, /IDEM_FORWARD_SECRET/);
	await refuse([forward({ secret: SECRET })], { allowCrypto: false }, /set NODE_FUNCTION_ALLOW_BUILTIN=crypto .*Module 'crypto' is disallowed/);
});

test('fan-out destination template: verifies the forward, then claims the signed key itself', () => {
	const file = path.join(__dirname, '..', 'templates', 'intake-fan-out-destinations.json');
	const wf = JSON.parse(fs.readFileSync(file, 'utf8'));
	const byName = new Map(wf.nodes.map((n) => [n.name, n]));
	const verify = byName.get('Verify idem signature');
	assert.ok(verify, 'a Verify idem signature node');
	const { VERIFY_FORWARD_JS } = require('./generate-templates');
	assert.equal(verify.parameters.jsCode, VERIFY_FORWARD_JS);
	assert.equal(wf.connections['Event from idem'].main[0][0].node, 'Verify idem signature');
	const claims = wf.nodes.filter((n) => n.type === 'n8n-nodes-base.httpRequest' && /\/claim$/.test(n.parameters.url));
	assert.equal(claims.length, 1, 'one effect per destination workflow');
	// The key idem signed already names the destination (`evt_1:slack`): no suffix.
	assert.match(claims[0].parameters.url, /encodeURIComponent\(\$\('Verify idem signature'\)\.item\.json\.key\)/);
	const note = wf.nodes.find((n) => n.type === 'n8n-nodes-base.stickyNote');
	assert.match(note.parameters.content, /"forwards"/);
	assert.match(note.parameters.content, /"destination": "slack"/);
});

test('AI agent template: the agent acts only through idem (MCP Client Tool on /mcp/{ns}), approval with the operator token', () => {
	const file = path.join(__dirname, '..', 'templates', 'ai-agent-mcp-approval.json');
	const wf = JSON.parse(fs.readFileSync(file, 'utf8'));
	const byType = (t) => wf.nodes.filter((n) => n.type === t);
	const [agent] = byType('@n8n/n8n-nodes-langchain.agent');
	assert.ok(agent, 'an AI Agent');
	// Every sub-node attached to the agent: one chat model, and tools that are all idem's MCP endpoint.
	const into = (type) =>
		Object.entries(wf.connections)
			.filter(([, c]) => (c[type] ?? []).flat().some((l) => l.node === agent.name))
			.map(([from]) => wf.nodes.find((n) => n.name === from));
	const models = into('ai_languageModel');
	assert.equal(models.length, 1);
	assert.ok(models[0].credentials.openAiApi, 'the chat model takes an OpenAI(-compatible) credential');
	const tools = into('ai_tool');
	assert.ok(tools.length >= 1);
	for (const t of tools) {
		assert.equal(t.type, '@n8n/n8n-nodes-langchain.mcpClientTool', `${t.name}: a side effect the agent reaches outside idem`);
		assert.match(t.parameters.endpointUrl, /\$vars\.IDEM_URL.*\}\}\/mcp\/[A-Za-z0-9_-]+$/, t.name);
		assert.equal(t.parameters.serverTransport, 'httpStreamable', t.name);
		assert.equal(t.parameters.authentication, 'headerAuth', t.name);
		assert.deepEqual(t.credentials, { httpHeaderAuth: { id: 'idemWorkerToken1', name: 'idem worker token' } }, t.name);
	}
	// The approval calls idem's approve with the operator token; nothing in n8n sends the draft.
	const approve = wf.nodes.filter((n) => n.type === 'n8n-nodes-base.httpRequest' && /\/approve$/.test(n.parameters.url));
	assert.equal(approve.length, 1);
	assert.equal(approve[0].credentials.httpHeaderAuth.id, 'idemOperatorTok1');
	const posts = wf.nodes.filter((n) => n.type === 'n8n-nodes-base.httpRequest' && n.parameters.method !== 'GET');
	assert.deepEqual(posts.map((n) => n.name), [approve[0].name], 'the only POST is the approval');
	const note = wf.nodes.find((n) => n.type === 'n8n-nodes-base.stickyNote');
	assert.match(note.parameters.content, /"approval": "required"/);
	assert.match(note.parameters.content, /MCP Client Tool/);
});
