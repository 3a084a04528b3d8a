// Building blocks for the n8n workflow templates (stock nodes only).
//
// The templates in ../templates/*.json are generated from ./generate-templates.js so that every
// claim / switch / complete / fail block is wired the same way (same expressions, same options).
// Edit the generator, run `node tools/generate-templates.js`, commit both.
'use strict';

const crypto = require('node:crypto');

/** Deterministic v4-shaped UUID from a seed, so regenerating does not churn ids. */
function uuidFrom(seed) {
	const h = crypto.createHash('sha256').update(seed).digest('hex');
	return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** The credential every idem call uses: HTTP Header Auth, `Authorization: Bearer <worker token>`. */
const IDEM_CREDENTIAL = { httpHeaderAuth: { id: 'idemWorkerToken1', name: 'idem worker token' } };
/** Operator token (approve/reject/resolve), only in the approval template. */
const IDEM_OPERATOR_CREDENTIAL = { httpHeaderAuth: { id: 'idemOperatorTok1', name: 'idem operator token' } };

const SETTINGS = 'idem settings';
/** Reading the settings node from anywhere in the workflow (one item, so .first()). */
const S = `$('${SETTINGS}').first().json`;

/** `…/v1/namespaces/{ns}/keys/{key}/{verb}` with both path segments percent-encoded. */
function keyUrl(keyExpr, verb) {
	return `={{ ${S}.idem_url }}/v1/namespaces/{{ encodeURIComponent(${S}.namespace) }}/keys/{{ encodeURIComponent(${keyExpr}) }}/${verb}`;
}

class Workflow {
	constructor({ id, name, tags = [] }) {
		this.id = id;
		this.name = name;
		this.tags = tags;
		this.nodes = [];
		this.connections = {};
	}

	add(node) {
		if (this.nodes.some((n) => n.name === node.name)) throw new Error(`duplicate node name ${node.name}`);
		node.id = uuidFrom(`${this.id}/${node.name}`);
		this.nodes.push(node);
		return node.name;
	}

	/** Connect output `out` of `from` to input 0 of `to`. */
	link(from, to, out = 0) {
		const c = (this.connections[from] ??= {});
		c.main ??= [];
		while (c.main.length <= out) c.main.push([]);
		c.main[out].push({ node: to, type: 'main', index: 0 });
	}

	/** Attach a sub-node (chat model, tool, memory) to an AI node: `type` is e.g. `ai_tool`. */
	linkSub(from, to, type) {
		const c = (this.connections[from] ??= {});
		(c[type] ??= [[]])[0].push({ node: to, type, index: 0 });
	}

	toJSON() {
		return {
			id: this.id,
			name: this.name,
			nodes: this.nodes.map(({ id, name, type, typeVersion, position, ...rest }) => ({
				id,
				name,
				type,
				typeVersion,
				position,
				...rest,
			})),
			connections: this.connections,
			settings: { executionOrder: 'v1' },
			pinData: {},
			active: false,
			meta: { templateCredsSetupCompleted: false },
			tags: [],
		};
	}
}

function sticky(name, content, [x, y], { width = 420, height = 300, color = 7 } = {}) {
	return {
		name,
		type: 'n8n-nodes-base.stickyNote',
		typeVersion: 1,
		position: [x, y],
		parameters: { content, width, height, color },
	};
}

/** `options`: the Webhook node's options, e.g. `{ rawBody: true }` (the bytes as binary `data`). */
function webhook(name, path, pos, { method = 'POST', responseMode = 'responseNode', options = {} } = {}) {
	return {
		name,
		type: 'n8n-nodes-base.webhook',
		typeVersion: 2,
		position: pos,
		webhookId: uuidFrom(`webhook/${path}`),
		parameters: { httpMethod: method, path, responseMode, options },
	};
}

/**
 * The one place a user edits: idem's URL and namespace (+ the stand-in destinations).
 * `$vars.X` are n8n Variables; without them the defaults below apply.
 */
function settings(pos, namespace, extra = []) {
	const assignments = [
		['idem_url', "={{ ($vars.IDEM_URL || 'http://127.0.0.1:7780').replace(/\\/+$/, '') }}"],
		['namespace', namespace],
		...extra,
	].map(([name, value]) => ({ id: uuidFrom(`settings/${name}`), name, value, type: 'string' }));
	return {
		name: SETTINGS,
		type: 'n8n-nodes-base.set',
		typeVersion: 3.4,
		position: pos,
		parameters: { assignments: { assignments }, options: {} },
	};
}

function idemRequest(name, pos, { url, body, credential = IDEM_CREDENTIAL, full = true, retry = false, errorOutput = true }) {
	const node = {
		name,
		type: 'n8n-nodes-base.httpRequest',
		typeVersion: 4.2,
		position: pos,
		parameters: {
			method: 'POST',
			url,
			authentication: 'genericCredentialType',
			genericAuthType: 'httpHeaderAuth',
			sendBody: true,
			specifyBody: 'json',
			jsonBody: `={{ JSON.stringify(${body}) }}`,
			options: {
				// problem+json is not auto-detected as JSON: always parse as JSON.
				response: { response: full ? { fullResponse: true, neverError: true, responseFormat: 'json' } : { responseFormat: 'json' } },
				timeout: 40000,
			},
		},
		credentials: credential,
	};
	if (retry) Object.assign(node, { retryOnFail: true, maxTries: 5, waitBetweenTries: 2000 });
	if (errorOutput) node.onError = 'continueErrorOutput';
	return node;
}

/**
 * Claim. Full Response + Never Error: every answer (201, 200, 409, 422, 429, 503) arrives as
 * data for the Switch; only a transport failure takes the error output.
 * NEVER "Retry On Fail" here: a retried claim whose first answer was lost sees its own lease
 * (in_flight) and the work would wait for the lease to expire.
 */
function claim(name, pos, keyExpr, { payload, fingerprint, waitMs = 10000, leaseMs, leaseExpiry, correlation } = {}) {
	if (payload && fingerprint) throw new Error(`${name}: payload or fingerprint, not both`);
	const fields = [];
	if (payload) fields.push(`payload: ${payload}`);
	// A precomputed fingerprint (SHA-256 hex), e.g. of the raw bytes of a forwarded event.
	if (fingerprint) fields.push(`fingerprint: ${fingerprint}`);
	fields.push('owner: $execution.id');
	if (waitMs) fields.push(`wait_ms: ${waitMs}`);
	if (leaseMs) fields.push(`lease_ms: ${leaseMs}`);
	if (leaseExpiry) fields.push(`lease_expiry: '${leaseExpiry}'`);
	if (correlation) fields.push(`correlation_id: ${correlation}`);
	return idemRequest(name, pos, { url: keyUrl(keyExpr, 'claim'), body: `{ ${fields.join(', ')} }` });
}

const OUTCOME_OUTPUTS = [
	['Proceed', ['acquired']],
	['Duplicate', ['completed']],
	['Busy', ['in_flight', 'backoff', 'awaiting_approval', 'paused', 'limited']],
	['Needs review', ['needs_review']],
	['Blocked', ['conflict', 'failed_permanent']],
];
/** Output index of the outcome switch (the 6th, index 5, is "idem error": no outcome at all). */
const OUT = { proceed: 0, duplicate: 1, busy: 2, review: 3, blocked: 4, error: 5 };

function filter(name, conditions, combinator = 'or') {
	return {
		options: { caseSensitive: true, leftValue: '', typeValidation: 'loose', version: 2 },
		conditions: conditions.map((c, i) => ({ id: uuidFrom(`${name}/${i}`), ...c })),
		combinator,
	};
}

/** Outputs of the switch after an effect (the 7th, index 6, is "idem error": no outcome). */
const EFFECT_OUTCOME_OUTPUTS = [
	['Performed', ['performed']],
	['Duplicate', ['completed']],
	['Failed', ['failed_permanent']],
	['Retry later', ['backoff', 'in_flight', 'awaiting_approval', 'paused', 'limited']],
	['Needs review', ['needs_review']],
	['Blocked', ['conflict']],
];
const EFFECT_OUT = { performed: 0, duplicate: 1, failed: 2, retry: 3, review: 4, blocked: 5, error: 6 };

function outcomeSwitch(name, pos, outputs = OUTCOME_OUTPUTS) {
	return {
		name,
		type: 'n8n-nodes-base.switch',
		typeVersion: 3.2,
		position: pos,
		parameters: {
			rules: {
				values: outputs.map(([label, outcomes]) => ({
					conditions: filter(
						`${name}/${label}`,
						outcomes.map((o) => ({
							leftValue: '={{ $json.body.outcome }}',
							rightValue: o,
							operator: { type: 'string', operation: 'equals' },
						})),
					),
					renameOutput: true,
					outputKey: label,
				})),
			},
			looseTypeValidation: true,
			options: { fallbackOutput: 'extra', renameFallbackOutput: 'idem error' },
		},
	};
}

/**
 * Effect: idem makes the outbound call under the key. Full Response + Never Error like a claim:
 * every answer is data for the switch; only "idem unreachable" takes the error output. NEVER
 * "Retry On Fail" here either: calling again is safe (idem replays or resumes), but the node's
 * own retry would hide the outcome from the switch. The timeout covers the destination call.
 */
function effect(name, pos, keyExpr, { request, extra = [], timeoutMs = 30000 }) {
	const fields = [`request: ${request}`, 'owner: $execution.id', `timeout_ms: ${timeoutMs}`, ...extra];
	const node = idemRequest(name, pos, { url: keyUrl(keyExpr, 'effect'), body: `{ ${fields.join(', ')} }` });
	node.parameters.options.timeout = timeoutMs + 20000;
	return node;
}

/** IF the side effect's HTTP answer was 2xx (Full Response on the side-effect node). */
function ifOk(name, pos, statusExpr = '={{ $json.statusCode }}') {
	return {
		name,
		type: 'n8n-nodes-base.if',
		typeVersion: 2.2,
		position: pos,
		parameters: {
			conditions: filter(
				name,
				[
					{ leftValue: statusExpr, rightValue: 200, operator: { type: 'number', operation: 'gte' } },
					{ leftValue: statusExpr, rightValue: 300, operator: { type: 'number', operation: 'lt' } },
				],
				'and',
			),
			looseTypeValidation: true,
			options: {},
		},
	};
}

function ifExpr(name, pos, boolExpr) {
	return {
		name,
		type: 'n8n-nodes-base.if',
		typeVersion: 2.2,
		position: pos,
		parameters: {
			conditions: filter(name, [
				{ leftValue: boolExpr, rightValue: '', operator: { type: 'boolean', operation: 'true', singleValue: true } },
			]),
			looseTypeValidation: true,
			options: {},
		},
	};
}

/** Complete: "Retry On Fail" is safe here (the same complete repeated is a 200 no-op). */
function complete(name, pos, keyExpr, claimNode, { result, externalRef } = {}) {
	const fields = [`token: $('${claimNode}').item.json.body.token`];
	if (result) fields.push(`result: ${result}`);
	if (externalRef) fields.push(`external_ref: ${externalRef}`);
	return idemRequest(name, pos, {
		url: keyUrl(keyExpr, 'complete'),
		body: `{ ${fields.join(', ')} }`,
		full: false,
		retry: true,
		errorOutput: false,
	});
}

/** Fail after the destination answered non-2xx: idem classifies by the HTTP status. */
function failHttp(name, pos, keyExpr, claimNode, what) {
	return idemRequest(name, pos, {
		url: keyUrl(keyExpr, 'fail'),
		body: `{ token: $('${claimNode}').item.json.body.token, http_status: $json.statusCode, retry_after: ($json.headers || {})['retry-after'], error: { category: 'http', message: '${what} answered HTTP ' + $json.statusCode } }`,
		full: false,
		retry: true,
		errorOutput: false,
	});
}

/**
 * Fail after the side-effect node itself errored (no HTTP answer: connection refused, DNS,
 * timeout). n8n replaces socket codes by sentences, so both are matched. Refused / DNS = the
 * request never left (`sent: false` → retryable); a timeout or reset may have landed (ambiguous).
 */
function failTransport(name, pos, keyExpr, claimNode) {
	const m = "(($json.error && [$json.error.message, $json.error.description, $json.error.code].join(' ')) || String($json.error || ''))";
	return idemRequest(name, pos, {
		url: keyUrl(keyExpr, 'fail'),
		body: `{ token: $('${claimNode}').item.json.body.token, sent: /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|refused the connection|cannot be established|DNS server/i.test(${m}) ? false : undefined, error: { category: /timeout|timed out|ETIMEDOUT|ECONNABORTED|aborted/i.test(${m}) ? 'timeout' : 'connection', message: ${m}.slice(0, 300) } }`,
		full: false,
		retry: true,
		errorOutput: false,
	});
}

function respond(name, pos, { code, body, headers }) {
	const options = { responseCode: code };
	if (headers) {
		options.responseHeaders = { entries: headers.map(([n, v]) => ({ name: n, value: v })) };
	}
	return {
		name,
		type: 'n8n-nodes-base.respondToWebhook',
		typeVersion: 1.1,
		position: pos,
		parameters: { respondWith: 'json', responseBody: `={{ JSON.stringify(${body}) }}`, options },
	};
}

/** A stand-in for a real destination (CRM node, Gmail node, payment API…). */
function sideEffect(name, pos, { url, body, idempotencyKey, notes }) {
	const node = {
		name,
		type: 'n8n-nodes-base.httpRequest',
		typeVersion: 4.2,
		position: pos,
		parameters: {
			method: 'POST',
			url,
			sendHeaders: true,
			headerParameters: { parameters: [{ name: 'Idempotency-Key', value: `={{ ${idempotencyKey} }}` }] },
			sendBody: true,
			specifyBody: 'json',
			jsonBody: `={{ JSON.stringify(${body}) }}`,
			options: {
				response: { response: { fullResponse: true, neverError: true, responseFormat: 'json' } },
				timeout: 15000,
			},
		},
		onError: 'continueErrorOutput',
	};
	if (notes) Object.assign(node, { notes, notesInFlow: true });
	return node;
}

function code(name, pos, jsCode, notes) {
	const node = { name, type: 'n8n-nodes-base.code', typeVersion: 2, position: pos, parameters: { jsCode } };
	if (notes) Object.assign(node, { notes, notesInFlow: true });
	return node;
}

function noop(name, pos, notes) {
	const node = { name, type: 'n8n-nodes-base.noOp', typeVersion: 1, position: pos, parameters: {} };
	if (notes) Object.assign(node, { notes, notesInFlow: true });
	return node;
}

function schedule(name, pos, cron) {
	return {
		name,
		type: 'n8n-nodes-base.scheduleTrigger',
		typeVersion: 1.2,
		position: pos,
		parameters: { rule: { interval: [{ field: 'cronExpression', expression: cron }] } },
	};
}

module.exports = {
	EFFECT_OUT,
	EFFECT_OUTCOME_OUTPUTS,
	IDEM_CREDENTIAL,
	IDEM_OPERATOR_CREDENTIAL,
	OUT,
	OUTCOME_OUTPUTS,
	S,
	SETTINGS,
	Workflow,
	claim,
	code,
	complete,
	effect,
	failHttp,
	failTransport,
	ifExpr,
	ifOk,
	idemRequest,
	keyUrl,
	noop,
	outcomeSwitch,
	respond,
	schedule,
	settings,
	sideEffect,
	sticky,
	uuidFrom,
	webhook,
};
