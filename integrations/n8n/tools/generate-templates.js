#!/usr/bin/env node
// Generates ../templates/*.json (stock nodes only), ../node/examples/*.json (community node) and
// ../e2e/workflows/*.json (workflows only the end-to-end test runs).
// Usage: node integrations/n8n/tools/generate-templates.js [--check]
//   --check: exit 1 if a committed file differs from what this script generates.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');

const { OUT, S } = L;
const HERE = __dirname;
const TEMPLATES = path.join(HERE, '..', 'templates');
const EXAMPLES = path.join(HERE, '..', 'node', 'examples');
const E2E_WORKFLOWS = path.join(HERE, '..', 'e2e', 'workflows');

// Shared respond nodes of the webhook templates -------------------------------------------------

function respondBusy(w, name, pos, idExpr) {
	return w.add(
		L.respond(name, pos, {
			code: 409,
			body: `{ received: false, status: $json.body.outcome, retry_after_ms: $json.body.retry_after_ms, id: ${idExpr} }`,
			headers: [['Retry-After', '={{ Math.max(1, Math.ceil(($json.body.retry_after_ms || 5000) / 1000)) }}']],
		}),
	);
}

function respondIdemDown(w, name, pos, idExpr) {
	return w.add(
		L.respond(name, pos, {
			code: 503,
			body: `{ received: false, status: 'gate_unavailable', id: ${idExpr} }`,
			headers: [['Retry-After', '30']],
		}),
	);
}

// (a) Stripe-style webhook → CRM upsert → receipt email, one key per side effect ------------------

function stripeWebhook() {
	const w = new L.Workflow({ id: 'idemTplStripeWh1', name: 'idem · Stripe webhook → CRM upsert → receipt email' });
	const EV = "$('Stripe webhook').item.json.body";
	const KEY_CRM = `${EV}.id + ':crm'`;
	const KEY_RCPT = `${EV}.id + ':receipt'`;
	const ID = `${EV}.id`;

	w.add(
		L.sticky(
			'About this template',
			[
				'## Gate every side effect with idem',
				'One **key per side effect**: `{event id}:crm`, `{event id}:receipt` — never `$execution.id`.',
				'',
				'1. **Claim** before the effect (`wait_ms` lets concurrent duplicates wait for the first delivery and get its result).',
				'2. **Switch on `outcome`**: *acquired* → do it; *completed* → skip (duplicate); *in_flight/backoff* → 409, the provider retries later; *needs_review* → a person; *conflict* → same id, different data: stop.',
				'3. **Complete** after the effect (Retry On Fail is on: a repeated complete is a no-op). Non-2xx → **fail** with the HTTP status: idem classifies.',
				'',
				'Duplicates are answered **200** so the provider stops retrying. A duplicate of `:crm` still goes on to `:receipt` (the first delivery may have died in between).',
				'',
				'Setup: credential **idem worker token** (Header Auth: `Authorization` = `Bearer <token>`), n8n Variable `IDEM_URL` (or edit *idem settings*). Replace the two *(replace me)* nodes with your CRM and mail nodes.',
			].join('\n'),
			[-420, -60],
			{ width: 520, height: 520 },
		),
	);

	const hook = w.add(L.webhook('Stripe webhook', 'idem-stripe-events', [120, 300]));
	const set = w.add(
		L.settings([340, 300], 'stripe', [
			['crm_url', "={{ $vars.CRM_URL || 'https://crm.example.invalid/contacts/upsert' }}"],
			['mail_url', "={{ $vars.MAIL_URL || 'https://mail.example.invalid/send' }}"],
		]),
	);
	w.link(hook, set);

	// --- CRM
	const c1 = w.add(L.claim('Claim evt:crm', [560, 300], KEY_CRM, { payload: EV }));
	w.link(set, c1);
	const s1 = w.add(L.outcomeSwitch('crm: outcome?', [780, 280]));
	w.link(c1, s1, 0);
	const crm = w.add(
		L.sideEffect('CRM upsert (replace me)', [1040, 60], {
			url: `={{ ${S}.crm_url }}`,
			body: `{ event_id: ${ID}, customer: ((${EV}.data || {}).object || {}).customer_details || null }`,
			idempotencyKey: KEY_CRM,
			notes: 'Stand-in for your CRM node. Pass the key on as the idempotency key where the API has one.',
		}),
	);
	w.link(s1, crm, OUT.proceed);
	const crmOk = w.add(L.ifOk('CRM ok?', [1260, 40]));
	w.link(crm, crmOk, 0);
	const crmDone = w.add(
		L.complete('Complete evt:crm', [1480, 20], KEY_CRM, 'Claim evt:crm', {
			result: '{ contact: $json.body }',
		}),
	);
	w.link(crmOk, crmDone, 0);
	const crmFailHttp = w.add(L.failHttp('Fail evt:crm (HTTP status)', [1480, 180], KEY_CRM, 'Claim evt:crm', 'CRM'));
	w.link(crmOk, crmFailHttp, 1);
	const crmFailNet = w.add(L.failTransport('Fail evt:crm (no answer)', [1260, 220], KEY_CRM, 'Claim evt:crm'));
	w.link(crm, crmFailNet, 1);

	// --- receipt (reached after the CRM step was done now or before)
	const c2 = w.add(L.claim('Claim evt:receipt', [1740, 300], KEY_RCPT, { payload: EV }));
	w.link(crmDone, c2);
	w.link(s1, c2, OUT.duplicate);
	const s2 = w.add(L.outcomeSwitch('receipt: outcome?', [1960, 280]));
	w.link(c2, s2, 0);
	const mail = w.add(
		L.sideEffect('Send receipt email (replace me)', [2220, 60], {
			url: `={{ ${S}.mail_url }}`,
			body: `{ event_id: ${ID}, template: 'receipt', to: (((${EV}.data || {}).object || {}).customer_details || {}).email || null }`,
			idempotencyKey: KEY_RCPT,
			notes: 'Stand-in for your mail node (Gmail, SendGrid…).',
		}),
	);
	w.link(s2, mail, OUT.proceed);
	const mailOk = w.add(L.ifOk('Email ok?', [2440, 40]));
	w.link(mail, mailOk, 0);
	const mailDone = w.add(
		L.complete('Complete evt:receipt', [2660, 20], KEY_RCPT, 'Claim evt:receipt', { result: '{ sent: true }' }),
	);
	w.link(mailOk, mailDone, 0);
	const mailFailHttp = w.add(
		L.failHttp('Fail evt:receipt (HTTP status)', [2660, 180], KEY_RCPT, 'Claim evt:receipt', 'Mail'),
	);
	w.link(mailOk, mailFailHttp, 1);
	const mailFailNet = w.add(L.failTransport('Fail evt:receipt (no answer)', [2440, 220], KEY_RCPT, 'Claim evt:receipt'));
	w.link(mail, mailFailNet, 1);

	const processed = w.add(
		L.respond('Respond 200: processed', [2880, 20], { code: 200, body: `{ received: true, status: 'processed', id: ${ID} }` }),
	);
	w.link(mailDone, processed);
	const dup = w.add(
		L.respond('Respond 200: duplicate', [2220, 300], {
			code: 200,
			body: `{ received: true, status: 'duplicate', id: ${ID}, result: $json.body.record.result }`,
		}),
	);
	w.link(s2, dup, OUT.duplicate);

	const failed = w.add(
		L.respond('Respond: failure recorded', [2880, 200], {
			code: "={{ $json.state === 'failed_permanent' ? 200 : 503 }}",
			body: `{ received: $json.state === 'failed_permanent', status: $json.state, retry: $json.retry, id: ${ID} }`,
		}),
	);
	for (const f of [crmFailHttp, crmFailNet, mailFailHttp, mailFailNet]) w.link(f, failed);

	const busy = respondBusy(w, 'Respond 409: busy, retry later', [2220, 460], ID);
	w.link(s1, busy, OUT.busy);
	w.link(s2, busy, OUT.busy);

	const alert = w.add(
		L.noop('Alert a person (replace me)', [2220, 620], 'needs_review or conflict: send key + state to on-call (Slack, email). No message bodies.'),
	);
	w.link(s1, alert, OUT.review);
	w.link(s1, alert, OUT.blocked);
	w.link(s2, alert, OUT.review);
	w.link(s2, alert, OUT.blocked);
	const person = w.add(
		L.respond('Respond: waiting for a person', [2440, 620], {
			code: "={{ $json.body.outcome === 'needs_review' ? 503 : 200 }}",
			body: `{ received: $json.body.outcome !== 'needs_review', status: $json.body.outcome, id: ${ID} }`,
		}),
	);
	w.link(alert, person);

	const down = respondIdemDown(w, 'Respond 503: gate unavailable', [2220, 780], ID);
	w.link(c1, down, 1);
	w.link(s1, down, OUT.error);
	w.link(c2, down, 1);
	w.link(s2, down, OUT.error);
	return w;
}

// (b) AI draft → prepare (approval) → approve → deliver the saved draft ---------------------------

function aiDraftApproval() {
	const w = new L.Workflow({ id: 'idemTplAiDraft01', name: 'idem · AI draft → approval → deliver the approved draft' });
	const ORDER = "$('New order').item.json.body";
	const NEW_KEY = `'order-' + ${ORDER}.order_id + ':draft-followup:v1'`;
	const APPROVE_KEY = "'order-' + $('Approve link').item.json.query.order + ':draft-followup:v1'";
	const LEASE = "$('Draft saved?').item.json.body";
	const KEY = `${LEASE}.record.key`;

	w.add(
		L.sticky(
			'About this template',
			[
				'## Generate once, approve, deliver exactly the approved text',
				'Key: `order-{id}:draft-followup:v1` (the business action + a version, never the model output).',
				'',
				'**New order** → claim → *Draft saved?* no → generate → **prepare** with `approval_required` (idem saves the draft; the key waits in *awaiting_approval*) → ask a person.',
				'',
				'**Approve link** (operator token) → `approve` → **claim** again: idem answers *acquired, resumed* with `record.prepared_payload` → *Draft saved?* yes → deliver **the saved draft** (never a new generation) → complete.',
				'',
				'A redelivered order while waiting gets *awaiting_approval* (Busy); after delivery *completed* (Duplicate). If delivery crashed after prepare, the next claim resumes with the saved draft.',
				'',
				'Setup: credentials **idem worker token** and **idem operator token** (Header Auth), Variable `IDEM_URL`, replace the *(replace me)* nodes.',
			].join('\n'),
			[-420, -80],
			{ width: 520, height: 560 },
		),
	);

	const hookA = w.add(L.webhook('New order', 'idem-ai-draft', [120, 260]));
	const hookB = w.add(L.webhook('Approve link', 'idem-ai-draft-approve', [120, 520], { method: 'GET' }));
	const set = w.add(
		L.settings([340, 380], 'followups', [
			['mail_url', "={{ $vars.MAIL_URL || 'https://mail.example.invalid/send' }}"],
			['approval_url', "={{ $vars.APPROVAL_URL || 'https://chat.example.invalid/approvals' }}"],
			['approve_link', "={{ $vars.APPROVE_LINK || 'http://localhost:5678/webhook/idem-ai-draft-approve' }}"],
		]),
	);
	w.link(hookA, set);
	w.link(hookB, set);
	const which = w.add(L.ifExpr('Approval click?', [560, 380], "={{ $('Approve link').isExecuted }}"));
	w.link(set, which);

	// New order path
	const claimA = w.add(
		L.claim('Claim draft', [800, 220], NEW_KEY, {
			payload: `{ order_id: ${ORDER}.order_id, customer: ${ORDER}.customer_email }`,
			waitMs: 0,
		}),
	);
	w.link(which, claimA, 1);
	const swA = w.add(L.outcomeSwitch('draft: outcome?', [1020, 200]));
	w.link(claimA, swA, 0);

	// Approval path
	const approve = w.add(
		L.idemRequest('Approve in idem', [800, 540], {
			url: L.keyUrl(APPROVE_KEY, 'approve'),
			body: "{ note: 'approved via the n8n approval link' }",
			credential: L.IDEM_OPERATOR_CREDENTIAL,
		}),
	);
	w.link(which, approve, 0);
	const claimB = w.add(L.claim('Claim to deliver', [1020, 540], APPROVE_KEY, { waitMs: 0 }));
	w.link(approve, claimB, 0);
	const swB = w.add(L.outcomeSwitch('deliver: outcome?', [1240, 540]));
	w.link(claimB, swB, 0);

	// Shared: the lease holder decides what to do from what idem saved.
	const saved = w.add(L.ifExpr('Draft saved?', [1300, 200], '={{ !!$json.body.record.prepared_payload }}'));
	w.link(swA, saved, OUT.proceed);
	w.link(swB, saved, OUT.proceed);

	const gen = w.add(
		L.code(
			'Generate draft (AI stand-in)',
			[1540, 300],
			[
				"// Replace with your AI node (OpenAI, Anthropic…). Runs once per key: a retry resumes the saved draft.",
				"const order = $('New order').first().json.body;",
				'return [{ json: {',
				'  to: order.customer_email,',
				"  subject: `About your order ${order.order_id}`,",
				"  text: `Hi! Thanks for order ${order.order_id}. (draft generated by AI)`,",
				'} }];',
			].join('\n'),
			'Replace with your AI node',
		),
	);
	w.link(saved, gen, 1);
	const prep = w.add(
		L.idemRequest('Prepare (approval required)', [1760, 300], {
			url: L.keyUrl(KEY, 'prepare'),
			body: `{ token: ${LEASE}.token, payload: { to: $json.to, subject: $json.subject, text: $json.text }, approval_required: true }`,
			full: false,
			retry: true,
			errorOutput: false,
		}),
	);
	w.link(gen, prep);
	const ask = w.add(
		L.sideEffect('Ask for approval (replace me)', [1980, 300], {
			url: `={{ ${S}.approval_url }}`,
			body: `{ key: $json.record.key, draft: $json.record.prepared_payload, approve: ${S}.approve_link + '?order=' + encodeURIComponent(${ORDER}.order_id) }`,
			idempotencyKey: `${KEY} + ':ask'`,
			notes: 'Stand-in: post the draft + approve link to Slack/email.',
		}),
	);
	w.link(prep, ask);
	const r202 = w.add(
		L.respond('Respond 202: awaiting approval', [2200, 300], {
			code: 202,
			body: `{ status: 'awaiting_approval', key: ${KEY} }`,
		}),
	);
	w.link(ask, r202, 0);
	w.link(ask, r202, 1);

	const deliver = w.add(
		L.sideEffect('Deliver email (replace me)', [1540, 100], {
			url: `={{ ${S}.mail_url }}`,
			body: `${LEASE}.record.prepared_payload`,
			idempotencyKey: KEY,
			notes: 'Sends exactly the saved (approved) draft.',
		}),
	);
	w.link(saved, deliver, 0);
	const ok = w.add(L.ifOk('Delivered?', [1760, 80]));
	w.link(deliver, ok, 0);
	const done = w.add(
		L.complete('Complete delivery', [1980, 60], KEY, 'Draft saved?', {
			result: '{ message_id: ($json.body || {}).id || null }',
			externalRef: '($json.body || {}).id',
		}),
	);
	w.link(ok, done, 0);
	const sent = w.add(L.respond('Respond 200: sent', [2200, 60], { code: 200, body: `{ status: 'sent', key: ${KEY} }` }));
	w.link(done, sent);
	const fHttp = w.add(L.failHttp('Fail delivery (HTTP status)', [1980, 160], KEY, 'Draft saved?', 'Mail'));
	w.link(ok, fHttp, 1);
	const fNet = w.add(L.failTransport('Fail delivery (no answer)', [1760, 200], KEY, 'Draft saved?'));
	w.link(deliver, fNet, 1);
	const failed = w.add(
		L.respond('Respond: failure recorded', [2200, 160], {
			code: "={{ $json.state === 'failed_permanent' ? 200 : 503 }}",
			body: '{ status: $json.state, retry: $json.retry }',
		}),
	);
	w.link(fHttp, failed);
	w.link(fNet, failed);

	const dup = w.add(
		L.respond('Respond 200: already sent', [1540, 620], {
			code: 200,
			body: "{ status: 'duplicate', key: $json.body.record.key, result: $json.body.record.result }",
		}),
	);
	w.link(swA, dup, OUT.duplicate);
	w.link(swB, dup, OUT.duplicate);
	const waiting = w.add(
		L.respond('Respond 202: not now', [1540, 780], {
			code: 202,
			body: "{ status: $json.body.outcome, key: $json.body.record && $json.body.record.key, retry_after_ms: $json.body.retry_after_ms }",
		}),
	);
	w.link(swA, waiting, OUT.busy);
	w.link(swB, waiting, OUT.busy);
	const alert = w.add(L.noop('Alert a person (replace me)', [1540, 940], 'needs_review / conflict / rejected'));
	for (const sw of [swA, swB]) {
		w.link(sw, alert, OUT.review);
		w.link(sw, alert, OUT.blocked);
	}
	const person = w.add(
		L.respond('Respond 200: handed to a person', [1760, 940], {
			code: 200,
			body: '{ status: $json.body.outcome }',
		}),
	);
	w.link(alert, person);
	const down = w.add(
		L.respond('Respond 503: gate unavailable', [1540, 1100], {
			code: 503,
			body: "{ status: 'gate_unavailable' }",
			headers: [['Retry-After', '30']],
		}),
	);
	for (const [n, o] of [
		[claimA, 1],
		[swA, OUT.error],
		[approve, 1],
		[claimB, 1],
		[swB, OUT.error],
	]) {
		w.link(n, down, o);
	}
	return w;
}

// (b2) AI Agent + MCP Client Tool: the agent's side effect is an idem action ------------------------

/** Where n8n's MCP Client Tool / MCP Client reach idem: `{IDEM_URL}/mcp/{namespace}`. */
const MCP_ENDPOINT = (ns) => `={{ ($vars.IDEM_URL || 'http://127.0.0.1:7780').replace(/\\/+$/, '') }}/mcp/${ns}`;

/** The chat model's credential in the templates: an OpenAI account (its Base URL may point at any OpenAI-compatible server). */
const OPENAI_CREDENTIAL = { openAiApi: { id: 'idemOpenAiCred01', name: 'OpenAI account' } };

const AGENT_NOTE = [
	'## An AI agent whose e-mail goes out once, after a person approved it',
	'The agent has **one** tool: idem\'s action `send_followup`, reached through the **MCP Client Tool** (Endpoint `{IDEM_URL}/mcp/shop`, HTTP Streamable, Header Auth = **idem worker token**). idem keys the call by the order (`{order_id}:followup:v1`), never by the generated text.',
	'',
	'Declare the action in idem with `"approval": "required"` (docs/agents.md). Then:',
	'1. **Order needs a follow-up** → the agent drafts and calls the tool → idem **saves the draft** and answers *awaiting_approval* (nothing is sent). *Read the record* shows the saved draft; *Respond* hands back the approve link.',
	'2. A retried / replayed execution drafts **other** text: idem keeps the **first** draft and answers *awaiting_approval* again.',
	'3. **Approve link** (GET `?order=…`, operator token) → idem `approve` → **idem delivers the saved draft itself** (outbox, retries, classification). Approving in idem\'s console does the same.',
	'4. Later executions are told *completed, replayed*: nothing new is sent.',
	'',
	'Setup: credentials **OpenAI account**, **idem worker token**, **idem operator token**; Variable `IDEM_URL`. Attach no other tool that sends the same e-mail: that path would bypass idem.',
].join('\n');

function aiAgentMcpApproval() {
	const NS = 'shop';
	const w = new L.Workflow({ id: 'idemTplAgentMcp1', name: 'idem · AI Agent + MCP Client Tool → approval → idem delivers the saved draft' });
	// One item per execution: read earlier nodes with .first() (paired items do not survive
	// the agent's sub-node calls in every n8n version).
	const ORDER = "$('Order needs a follow-up').first().json.body";
	const KEY = `${ORDER}.order_id + ':followup:v1'`;
	const APPROVE_KEY = "$('Approve link').item.json.query.order + ':followup:v1'";

	w.add(L.sticky('About this template', AGENT_NOTE, [-460, -120], { width: 560, height: 640 }));
	const hookA = w.add(L.webhook('Order needs a follow-up', 'idem-agent-followup', [120, 240]));
	const hookB = w.add(L.webhook('Approve link', 'idem-agent-approve', [120, 560], { method: 'GET' }));
	const set = w.add(
		L.settings([340, 400], NS, [
			['approve_link', "={{ $vars.AGENT_APPROVE_LINK || 'http://localhost:5678/webhook/idem-agent-approve' }}"],
		]),
	);
	w.link(hookA, set);
	w.link(hookB, set);
	const which = w.add(L.ifExpr('Approval click?', [560, 400], "={{ $('Approve link').isExecuted }}"));
	w.link(set, which);

	// The agent: a chat model and idem's tools, nothing else that acts.
	const agent = w.add({
		name: 'AI Agent',
		type: '@n8n/n8n-nodes-langchain.agent',
		typeVersion: 3,
		position: [820, 220],
		parameters: {
			promptType: 'define',
			text: `=Write and send the follow-up e-mail for this order: {{ JSON.stringify({ order_id: ${ORDER}.order_id, to: ${ORDER}.customer_email, items: ${ORDER}.items }) }}`,
			options: {
				systemMessage:
					'You write short, friendly follow-up e-mails for orders and send them with the send_followup tool: call it once per order, with the order_id and to of the order. The tool result is authoritative: if it says the e-mail waits for approval, was already sent or is in progress, do not call it again; report what it said.',
			},
		},
	});
	w.link(which, agent, 1);
	const model = w.add({
		name: 'OpenAI Chat Model',
		type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
		typeVersion: 1.3,
		position: [760, 460],
		// Chat Completions (not the Responses API): what OpenAI-compatible servers (vLLM, LiteLLM,
		// Ollama's /v1) speak too; set the credential's Base URL to use one.
		parameters: { model: { __rl: true, mode: 'list', value: 'gpt-4o-mini' }, responsesApiEnabled: false, options: {} },
		credentials: OPENAI_CREDENTIAL,
	});
	w.linkSub(model, agent, 'ai_languageModel');
	const tool = w.add({
		name: 'idem actions (MCP)',
		type: '@n8n/n8n-nodes-langchain.mcpClientTool',
		typeVersion: 1.2,
		position: [940, 460],
		parameters: {
			endpointUrl: MCP_ENDPOINT(NS),
			serverTransport: 'httpStreamable',
			authentication: 'headerAuth',
			include: 'all',
			options: {},
		},
		credentials: L.IDEM_CREDENTIAL,
		notes: 'idem serves each action of the namespace as a tool; one call per business identity is delivered.',
		notesInFlow: true,
	});
	w.linkSub(tool, agent, 'ai_tool');

	// What idem holds for the order: the saved draft while it waits for a person.
	const read = w.add({
		name: 'Read the record',
		type: 'n8n-nodes-base.httpRequest',
		typeVersion: 4.2,
		position: [1100, 220],
		parameters: {
			method: 'GET',
			url: `={{ ${S}.idem_url }}/v1/namespaces/{{ encodeURIComponent(${S}.namespace) }}/keys/{{ encodeURIComponent(${KEY}) }}`,
			authentication: 'genericCredentialType',
			genericAuthType: 'httpHeaderAuth',
			options: { response: { response: { fullResponse: true, neverError: true, responseFormat: 'json' } }, timeout: 10000 },
		},
		credentials: L.IDEM_CREDENTIAL,
	});
	w.link(agent, read);
	const waiting = w.add(
		L.ifExpr('Waiting for approval?', [1320, 220], "={{ $json.statusCode === 200 && $json.body.record.state === 'awaiting_approval' }}"),
	);
	w.link(read, waiting);
	const notify = w.add(
		L.noop(
			'Tell a person (replace me)',
			[1540, 120],
			'Post the saved draft ($json.body.record.prepared_payload) and the approve link to Slack / e-mail.',
		),
	);
	w.link(waiting, notify, 0);
	const r202 = w.add(
		L.respond('Respond 202: awaiting approval', [1760, 120], {
			code: 202,
			body: `{ status: 'awaiting_approval', key: $('Read the record').first().json.body.record.key, draft: $('Read the record').first().json.body.record.prepared_payload, approve: ${S}.approve_link + '?order=' + encodeURIComponent(${ORDER}.order_id), answer: $('AI Agent').first().json.output }`,
		}),
	);
	w.link(notify, r202);
	const r200 = w.add(
		L.respond('Respond 200: what idem did', [1540, 320], {
			code: 200,
			body: `{ status: $json.statusCode === 200 ? $json.body.record.state : 'no_record', key: ${KEY}, answer: $('AI Agent').first().json.output }`,
		}),
	);
	w.link(waiting, r200, 1);

	// The approval: idem delivers the saved draft itself, in the background.
	const approve = w.add(
		L.idemRequest('Approve in idem', [820, 640], {
			url: L.keyUrl(APPROVE_KEY, 'approve'),
			body: "{ note: 'approved via the n8n approval link' }",
			credential: L.IDEM_OPERATOR_CREDENTIAL,
		}),
	);
	w.link(which, approve, 0);
	const approved = w.add(
		L.respond('Respond: approval recorded', [1100, 600], {
			code: '={{ $json.statusCode }}',
			body: "{ status: $json.statusCode === 200 ? 'approved' : ($json.body.code || $json.body.title || 'refused'), key: $json.body.key || ($json.body.record && $json.body.record.key) || null }",
		}),
	);
	w.link(approve, approved, 0);
	const down = w.add(
		L.respond('Respond 503: idem unreachable', [1100, 760], {
			code: 503,
			body: "{ status: 'gate_unavailable' }",
			headers: [['Retry-After', '30']],
		}),
	);
	w.link(approve, down, 1);
	return w;
}

// End-to-end test workflow (not a template): n8n's MCP Client node calls one idem action ---------

function e2eMcpClientNode() {
	const w = new L.Workflow({ id: 'idemE2eMcpClient', name: 'idem e2e · MCP Client node calls an idem action' });
	const hook = w.add(L.webhook('Receipt requested', 'idem-e2e-mcp-client', [0, 0]));
	const call = w.add({
		name: 'Send receipt (idem action)',
		type: '@n8n/n8n-nodes-langchain.mcpClient',
		typeVersion: 1,
		position: [240, 0],
		parameters: {
			serverTransport: 'httpStreamable',
			endpointUrl: MCP_ENDPOINT('mcp-e2e'),
			authentication: 'headerAuth',
			tool: { __rl: true, mode: 'id', value: 'send_receipt' },
			inputMode: 'json',
			jsonInput: '={{ JSON.stringify({ order_id: $json.body.order_id, to: $json.body.to, text: $json.body.text }) }}',
			options: { timeout: 30000 },
		},
		credentials: L.IDEM_CREDENTIAL,
		onError: 'continueErrorOutput',
	});
	w.link(hook, call);
	// The node's output holds the result's `content` only (no structuredContent, no isError):
	// the outcome is in idem's sentence.
	const ok = w.add(L.respond('Respond: what idem said', [480, -80], { code: 200, body: '{ text: ($json.content || [])[0] && $json.content[0].text, content: $json.content }' }));
	w.link(call, ok, 0);
	const err = w.add(L.respond('Respond 500: the node failed', [480, 80], { code: 500, body: '{ error: $json.error }' }));
	w.link(call, err, 1);
	return w;
}

// (c) Cron sweep keyed by job + date ----------------------------------------------------------------

function cronSweep() {
	const w = new L.Workflow({ id: 'idemTplCronSwp01', name: 'idem · daily sweep keyed by job + date' });
	const KEY = `${S}.job + ':' + $now.toUTC().toFormat('yyyy-LL-dd')`;
	w.add(
		L.sticky(
			'About this template',
			[
				'## One sweep per day, whatever the scheduler does',
				'Key: `{job}:{UTC date}`, e.g. `renewal-reminders:2026-06-22`.',
				'',
				'The daily trigger runs the sweep; the **catch-up** trigger claims the same key every 15 minutes: *completed* → nothing to do, *backoff* → not yet, *acquired (resumed)* after a retryable failure → runs it again. Two n8n instances, a restart or a manual run: still once per day.',
				'',
				'The lease (15 min) must cover the sweep. Longer sweeps: heartbeat, or fan out with one key per item (see the fan-out template).',
				'',
				'Setup: credential **idem worker token**, Variable `IDEM_URL`, replace *Run the sweep (replace me)*.',
			].join('\n'),
			[-420, -40],
			{ width: 520, height: 420 },
		),
	);
	const daily = w.add(L.schedule('Every day 06:00', [120, 200], '0 6 * * *'));
	const catchUp = w.add(L.schedule('Catch-up every 15 min', [120, 400], '*/15 * * * *'));
	const set = w.add(
		L.settings([340, 300], 'jobs', [
			['job', 'renewal-reminders'],
			['sweep_url', "={{ $vars.SWEEP_URL || 'https://crm.example.invalid/renewal-reminders/run' }}"],
		]),
	);
	w.link(daily, set);
	w.link(catchUp, set);
	const cl = w.add(
		L.claim('Claim job:date', [560, 300], KEY, { payload: `{ job: ${S}.job }`, waitMs: 0, leaseMs: 900000 }),
	);
	w.link(set, cl);
	const sw = w.add(L.outcomeSwitch('sweep: outcome?', [780, 280]));
	w.link(cl, sw, 0);
	const run = w.add(
		L.sideEffect('Run the sweep (replace me)', [1040, 80], {
			url: `={{ ${S}.sweep_url }}`,
			body: `{ job: ${S}.job, date: $now.toUTC().toFormat('yyyy-LL-dd') }`,
			idempotencyKey: KEY,
			notes: 'Stand-in for the real work (query due renewals, send reminders).',
		}),
	);
	w.link(sw, run, OUT.proceed);
	const ok = w.add(L.ifOk('Sweep ok?', [1260, 60]));
	w.link(run, ok, 0);
	const done = w.add(L.complete('Complete job:date', [1480, 40], KEY, 'Claim job:date', { result: '{ answer: $json.body }' }));
	w.link(ok, done, 0);
	const fHttp = w.add(L.failHttp('Fail job:date (HTTP status)', [1480, 200], KEY, 'Claim job:date', 'Sweep'));
	w.link(ok, fHttp, 1);
	const fNet = w.add(L.failTransport('Fail job:date (no answer)', [1260, 240], KEY, 'Claim job:date'));
	w.link(run, fNet, 1);
	const already = w.add(L.noop('Already ran today', [1040, 300]));
	w.link(sw, already, OUT.duplicate);
	const notNow = w.add(L.noop('Not now (running or backing off)', [1040, 440], 'The catch-up trigger tries again'));
	w.link(sw, notNow, OUT.busy);
	const alert = w.add(L.noop('Alert a person (replace me)', [1040, 580], 'needs_review: did the sweep run? A person resolves the key.'));
	w.link(sw, alert, OUT.review);
	w.link(sw, alert, OUT.blocked);
	const stop = w.add({
		name: 'Stop: gate unavailable',
		type: 'n8n-nodes-base.stopAndError',
		typeVersion: 1,
		position: [1040, 720],
		parameters: { errorMessage: '=idem did not answer the claim: {{ $json.error ? ($json.error.message || $json.error) : ($json.body && $json.body.code) }}' },
	});
	w.link(cl, stop, 1);
	w.link(sw, stop, OUT.error);
	return w;
}

// (d) Fan-out: one key per side effect ----------------------------------------------------------------

function fanOut() {
	const w = new L.Workflow({ id: 'idemTplFanOut001', name: 'idem · fan-out with one key per side effect' });
	const ITEM = "$('One item per side effect').item.json";
	w.add(
		L.sticky(
			'About this template',
			[
				'## Many side effects from one event: one key each',
				'`order-{id}:charge`, `order-{id}:email`, `order-{id}:ship:{sku}` — every effect is gated on its own, so a retry after a partial failure redoes only what is missing.',
				'',
				'The webhook is acknowledged at once (*Respond: Immediately*); the gate keeps replays harmless. Items flow through the same nodes; `$(…).item` keeps each item with its own claim.',
				'',
				'Setup: credential **idem worker token**, Variable `IDEM_URL`, replace *Do the side effect (replace me)* (or add a Switch on `effect`).',
			].join('\n'),
			[-420, -40],
			{ width: 520, height: 380 },
		),
	);
	const hook = w.add(L.webhook('Order placed', 'idem-order-fanout', [120, 300], { responseMode: 'onReceived' }));
	const set = w.add(
		L.settings([340, 300], 'orders', [['effect_url', "={{ $vars.EFFECT_URL || 'https://api.example.invalid/effects' }}"]]),
	);
	w.link(hook, set);
	const split = w.add(
		L.code(
			'One item per side effect',
			[560, 300],
			[
				"const order = $('Order placed').first().json.body;",
				"if (!order || order.id === undefined || order.id === null) throw new Error('order.id missing: no key, no side effect');",
				'const effects = [',
				"  { effect: 'charge', key: `order-${order.id}:charge`, data: { amount: order.amount, currency: order.currency } },",
				"  { effect: 'email', key: `order-${order.id}:email`, data: { to: order.email, template: 'order-confirmation' } },",
				'  ...(order.items || []).map((it) => ({',
				"    effect: 'ship', key: `order-${order.id}:ship:${it.sku}`, data: { sku: it.sku, qty: it.qty },",
				'  })),',
				'];',
				'return effects.map((json) => ({ json }));',
			].join('\n'),
		),
	);
	w.link(set, split);
	const cl = w.add(L.claim('Claim (one key per effect)', [780, 300], '$json.key', { payload: '$json.data', waitMs: 0 }));
	w.link(split, cl);
	const sw = w.add(L.outcomeSwitch('effect: outcome?', [1000, 280]));
	w.link(cl, sw, 0);
	const act = w.add(
		L.sideEffect('Do the side effect (replace me)', [1260, 80], {
			url: `={{ ${S}.effect_url + '/' + ${ITEM}.effect }}`,
			body: `${ITEM}.data`,
			idempotencyKey: `${ITEM}.key`,
		}),
	);
	w.link(sw, act, OUT.proceed);
	const ok = w.add(L.ifOk('Effect ok?', [1480, 60]));
	w.link(act, ok, 0);
	const done = w.add(
		L.complete('Complete effect', [1700, 40], `${ITEM}.key`, 'Claim (one key per effect)', { result: '{ answer: $json.body }' }),
	);
	w.link(ok, done, 0);
	const fHttp = w.add(L.failHttp('Fail effect (HTTP status)', [1700, 200], `${ITEM}.key`, 'Claim (one key per effect)', 'Destination'));
	w.link(ok, fHttp, 1);
	const fNet = w.add(L.failTransport('Fail effect (no answer)', [1480, 240], `${ITEM}.key`, 'Claim (one key per effect)'));
	w.link(act, fNet, 1);
	w.link(sw, w.add(L.noop('Skip: already done', [1260, 300])), OUT.duplicate);
	w.link(sw, w.add(L.noop('Skip: not now (retry later)', [1260, 440])), OUT.busy);
	const alert = w.add(L.noop('Alert a person (replace me)', [1260, 580], 'needs_review / conflict for this effect'));
	w.link(sw, alert, OUT.review);
	w.link(sw, alert, OUT.blocked);
	const stop = w.add({
		name: 'Stop: gate unavailable',
		type: 'n8n-nodes-base.stopAndError',
		typeVersion: 1,
		position: [1260, 720],
		parameters: { errorMessage: '=idem did not answer the claim for {{ $json.key }}' },
	});
	w.link(cl, stop, 1);
	w.link(sw, stop, OUT.error);
	return w;
}

// (e) The error branch: fail with the HTTP status, idem classifies -----------------------------------

function errorBranch() {
	const w = new L.Workflow({ id: 'idemTplFailBrnch', name: 'idem · charge with the error branch (fail → idem classifies)' });
	const REQ = "$('Charge request').item.json.body";
	const KEY = `'order-' + ${REQ}.order_id + ':charge'`;
	w.add(
		L.sticky(
			'About this template',
			[
				'## The error branch: tell idem what happened, let it classify',
				'The charge node has **Never Error** + **Full Response** (every HTTP answer is data) and its **error output** on (no answer at all).',
				'',
				'- 2xx → **complete** (stores the charge id; duplicates get it back).',
				'- non-2xx → **fail** with `http_status` (+ `Retry-After`): 408/425/429/503 retryable, other 5xx *ambiguous* → needs_review (the charge may exist), 4xx permanent.',
				'- no answer → **fail** with `category` timeout/connection; `sent: false` only when the connection was refused (retryable), else ambiguous.',
				'',
				'The answer says `state` and `retry.allowed`: 503 + Retry-After to the caller, a person for *needs_review*, a final answer for *failed_permanent*.',
				'',
				'Money path: `lease_expiry: review` — a crashed run goes to a person, never silently re-charged. **Never** turn on Retry On Fail on the claim.',
			].join('\n'),
			[-420, -60],
			{ width: 520, height: 520 },
		),
	);
	const hook = w.add(L.webhook('Charge request', 'idem-charge', [120, 300]));
	const set = w.add(
		L.settings([340, 300], 'payments', [['pay_url', "={{ $vars.PAYMENT_URL || 'https://payments.example.invalid/v1/charges' }}"]]),
	);
	w.link(hook, set);
	const cl = w.add(
		L.claim('Claim order:charge', [560, 300], KEY, {
			payload: `{ order_id: ${REQ}.order_id, amount: ${REQ}.amount, currency: ${REQ}.currency, customer: ${REQ}.customer }`,
			leaseExpiry: 'review',
			leaseMs: 60000,
		}),
	);
	w.link(set, cl);
	const sw = w.add(L.outcomeSwitch('charge: outcome?', [780, 280]));
	w.link(cl, sw, 0);
	const charge = w.add(
		L.sideEffect('Charge card (replace me)', [1040, 80], {
			url: `={{ ${S}.pay_url }}`,
			body: `{ amount: ${REQ}.amount, currency: ${REQ}.currency, customer: ${REQ}.customer, metadata: { order_id: ${REQ}.order_id } }`,
			idempotencyKey: KEY,
			notes: "Second layer: the provider's own Idempotency-Key carries the same key.",
		}),
	);
	w.link(sw, charge, OUT.proceed);
	const ok = w.add(L.ifOk('Charged (2xx)?', [1260, 60]));
	w.link(charge, ok, 0);
	const done = w.add(
		L.complete('Complete order:charge', [1480, 40], KEY, 'Claim order:charge', {
			result: '{ charge_id: $json.body.id, status: $json.body.status }',
			externalRef: '$json.body.id',
		}),
	);
	w.link(ok, done, 0);
	const r200 = w.add(
		L.respond('Respond 200: charged', [1700, 40], {
			code: 200,
			body: `{ status: 'charged', order_id: ${REQ}.order_id, charge_id: $json.record.external_ref }`,
		}),
	);
	w.link(done, r200);
	const fHttp = w.add(L.failHttp('Fail with HTTP status', [1480, 200], KEY, 'Claim order:charge', 'Payment API'));
	w.link(ok, fHttp, 1);
	const fNet = w.add(L.failTransport('Fail without answer', [1260, 260], KEY, 'Claim order:charge'));
	w.link(charge, fNet, 1);

	const decide = w.add({
		name: 'What did idem decide?',
		type: 'n8n-nodes-base.switch',
		typeVersion: 3.2,
		position: [1700, 240],
		parameters: {
			rules: {
				values: [
					['Retry later', 'failed_retryable'],
					['Needs review', 'needs_review'],
					['Permanent', 'failed_permanent'],
				].map(([label, state]) => ({
					conditions: {
						options: { caseSensitive: true, leftValue: '', typeValidation: 'loose', version: 2 },
						conditions: [
							{ id: L.uuidFrom(`decide/${state}`), leftValue: '={{ $json.state }}', rightValue: state, operator: { type: 'string', operation: 'equals' } },
						],
						combinator: 'and',
					},
					renameOutput: true,
					outputKey: label,
				})),
			},
			looseTypeValidation: true,
			options: {},
		},
	});
	w.link(fHttp, decide);
	w.link(fNet, decide);
	const r503 = w.add(
		L.respond('Respond 503: retry later', [1960, 140], {
			code: 503,
			body: `{ status: 'retry_later', order_id: ${REQ}.order_id, not_before: $json.retry.not_before, attempt: $json.retry.attempt }`,
			headers: [['Retry-After', '={{ Math.max(1, Math.ceil((Date.parse($json.retry.not_before) - Date.now()) / 1000)) || 5 }}']],
		}),
	);
	w.link(decide, r503, 0);
	const alert = w.add(
		L.noop('Alert a person (replace me)', [1960, 300], 'The charge may or may not exist: reconcile with the provider, then resolve the key in idem.'),
	);
	w.link(decide, alert, 1);
	const r202 = w.add(
		L.respond('Respond 202: a person decides', [2180, 300], {
			code: 202,
			body: `{ status: 'needs_review', order_id: ${REQ}.order_id }`,
		}),
	);
	w.link(alert, r202);
	const r422 = w.add(
		L.respond('Respond 422: not charged', [1960, 460], {
			code: 422,
			body: `{ status: 'failed_permanent', order_id: ${REQ}.order_id, error: $json.record.last_error }`,
		}),
	);
	w.link(decide, r422, 2);

	const dup = w.add(
		L.respond('Respond 200: already charged', [1040, 320], {
			code: 200,
			body: `{ status: 'charged', duplicate: true, order_id: ${REQ}.order_id, charge_id: $json.body.record.external_ref, result: $json.body.record.result }`,
		}),
	);
	w.link(sw, dup, OUT.duplicate);
	const busy = respondBusy(w, 'Respond 409: in progress', [1040, 480], `${REQ}.order_id`);
	w.link(sw, busy, OUT.busy);
	const alert2 = w.add(L.noop('Alert: review or conflict (replace me)', [1040, 640]));
	w.link(sw, alert2, OUT.review);
	w.link(sw, alert2, OUT.blocked);
	const r409 = w.add(
		L.respond('Respond 409: needs a person', [1260, 640], {
			code: 409,
			body: `{ status: $json.body.outcome, order_id: ${REQ}.order_id, error: $json.body.record && $json.body.record.last_error }`,
		}),
	);
	w.link(alert2, r409);
	const down = respondIdemDown(w, 'Respond 503: gate unavailable', [1040, 800], `${REQ}.order_id`);
	w.link(cl, down, 1);
	w.link(sw, down, OUT.error);
	return w;
}

// (g) Fed by idem's intake: verify the forward signature → gate each effect on Idem-Key --------

/**
 * The Code node that checks the Standard Webhooks signature idem puts on every forward of a
 * source with `forward.secret`, over the raw body (the Webhook node's Raw Body option), and
 * hands on the signed key. It throws on anything else: no effect runs, and the template routes
 * the thrown error (the node's error output) to a non-2xx answer.
 * Needs `require('crypto')`: NODE_FUNCTION_ALLOW_BUILTIN=crypto on the n8n instance.
 */
const VERIFY_FORWARD_JS = [
	"// Verifies idem's forward signature (Standard Webhooks: HMAC-SHA256 over",
	'// "{webhook-id}.{webhook-timestamp}.{raw body}") and passes on the signed key.',
	'// Needs NODE_FUNCTION_ALLOW_BUILTIN=crypto on the n8n instance (see idem docs/intake.md).',
	'let crypto;',
	'try {',
	"  crypto = require('crypto');",
	'} catch (e) {',
	"  throw new Error('The Code node may not load crypto: set NODE_FUNCTION_ALLOW_BUILTIN=crypto on the n8n instance (' + e.message + ')');",
	'}',
	"const secret = String($vars.IDEM_FORWARD_SECRET || '');",
	"if (!secret.startsWith('whsec_')) {",
	"  throw new Error('Set the n8n Variable IDEM_FORWARD_SECRET to the forward.secret of the idem source (whsec_...): no verified forward, no effect');",
	'}',
	"const hmacKey = Buffer.from(secret.slice('whsec_'.length), 'base64');",
	'const TOLERANCE_S = 300; // as the Standard Webhooks libraries',
	'const items = $input.all();',
	'const out = [];',
	'for (let i = 0; i < items.length; i++) {',
	'  const h = items[i].json.headers || {};',
	"  const id = h['webhook-id'];",
	"  const ts = h['webhook-timestamp'];",
	"  const sig = h['webhook-signature'];",
	"  if (!id || !ts || !sig) throw new Error('not a signed forward from idem (webhook-id, webhook-timestamp or webhook-signature missing)');",
	"  if (!/^[0-9]+$/.test(ts) || Math.abs(Date.now() / 1000 - Number(ts)) > TOLERANCE_S) throw new Error('webhook-timestamp malformed or more than 5 minutes off');",
	"  if (!items[i].binary || !items[i].binary.data) throw new Error('no raw body: turn on the Webhook node option Raw Body');",
	"  const raw = await this.helpers.getBinaryDataBuffer(i, 'data');",
	"  const expected = crypto.createHmac('sha256', hmacKey).update(Buffer.concat([Buffer.from(id + '.' + ts + '.'), raw])).digest();",
	"  const ok = String(sig).split(' ').some((part) => {",
	"    const comma = part.indexOf(',');",
	"    if (comma < 0 || part.slice(0, comma) !== 'v1') return false;",
	"    const got = Buffer.from(part.slice(comma + 1), 'base64');",
	'    return got.length === expected.length && crypto.timingSafeEqual(got, expected);',
	'  });',
	"  if (!ok) throw new Error('invalid idem forward signature');",
	"  if (h['idem-key'] !== id) throw new Error('Idem-Key differs from the signed webhook-id');",
	'  out.push({',
	'    json: {',
	'      key: id,',
	"      source: h['idem-source'] || null,",
	"      event_id: h['idem-event-id'] || null,",
	"      attempt: Number(h['idem-attempt']) || null,",
	"      received_at: h['idem-received-at'] || null,",
	"      body_sha256: crypto.createHash('sha256').update(raw).digest('hex'),",
	'      event: items[i].json.body,',
	'    },',
	'    pairedItem: { item: i },',
	'  });',
	'}',
	'return out;',
].join('\n');

const INTAKE_NOTE = [
	'## Fed by idem: verify, gate every effect, answer at once',
	'idem verifies the provider, keeps the event and forwards it here with `Idem-Key` (its key) and a Standard Webhooks signature (`forward.secret` of the source).',
	'',
	'1. **Verify idem signature** (Code node, Raw Body on): a forged or stale call stops before any effect and is answered 401 (*Respond 401: not verified*), so idem retries it and, if it never verifies (a wrong `IDEM_FORWARD_SECRET`), dead-letters it for a person instead of counting it delivered. Needs `NODE_FUNCTION_ALLOW_BUILTIN=crypto`.',
	'2. **Respond 200: received** right after it: idem gets its 2xx in milliseconds, and only from an execution that exists and has verified the forward (an n8n that is still starting can drop a request; idem then times out and sends it again). The work runs after the ack.',
	'3. One key per effect from the signed key: `{Idem-Key}:crm`, `{Idem-Key}:notify`. idem may deliver an event again (a timeout, a crash, an operator redeliver): same key, so the gate replays instead of redoing.',
	'',
	'A retryable failure waits in idem (`failed_retryable`): redeliver the event from idem and only the missing effects run. *needs_review* / *conflict*: a person.',
	'',
	'Setup: credential **idem worker token**, Variables `IDEM_URL` and `IDEM_FORWARD_SECRET` (Variables are readable by everyone who edits workflows), replace the *(replace me)* nodes. Source `forward.url` = this Webhook\'s **production** URL.',
].join('\n');

/** Claim → outcome switch → the effect → complete / fail, for one effect of the intake template. */
function intakeEffect(w, { label, effectName, key, x, y, url, body, notes }) {
	const claimName = `Claim ${label}`;
	const c = w.add(L.claim(claimName, [x, y], key, { fingerprint: "$('Verify idem signature').item.json.body_sha256" }));
	const s = w.add(L.outcomeSwitch(`${label}: outcome?`, [x + 220, y - 20]));
	w.link(c, s, 0);
	const act = w.add(L.sideEffect(effectName, [x + 480, y - 240], { url, body, idempotencyKey: key, notes }));
	w.link(s, act, OUT.proceed);
	const ok = w.add(L.ifOk(`${label} ok?`, [x + 700, y - 260]));
	w.link(act, ok, 0);
	const done = w.add(L.complete(`Complete ${label}`, [x + 920, y - 280], key, claimName, { result: '{ answer: $json.body }' }));
	w.link(ok, done, 0);
	const fHttp = w.add(L.failHttp(`Fail ${label} (HTTP status)`, [x + 920, y - 120], key, claimName, label));
	w.link(ok, fHttp, 1);
	const fNet = w.add(L.failTransport(`Fail ${label} (no answer)`, [x + 700, y - 80], key, claimName));
	w.link(act, fNet, 1);
	return { claim: c, sw: s, done, fails: [fHttp, fNet] };
}

function intakeForward() {
	const w = new L.Workflow({ id: 'idemTplIntakeFwd', name: 'idem · fed by the intake: verify the forward, gate each effect' });
	const V = "$('Verify idem signature').item.json";
	const KEY_CRM = `${V}.key + ':crm'`;
	const KEY_NOTIFY = `${V}.key + ':notify'`;
	w.add(L.sticky('About this template', INTAKE_NOTE, [-460, -100], { width: 560, height: 600 }));

	const hook = w.add(
		L.webhook('Event from idem', 'idem-intake-events', [120, 300], { responseMode: 'responseNode', options: { rawBody: true } }),
	);
	// The Code node reads the Webhook's own items (headers, the raw body as binary `data`), so
	// it comes first: a Set node in between would hand it only the settings.
	const verify = w.add({
		...L.code('Verify idem signature', [340, 300], VERIFY_FORWARD_JS, 'Standard Webhooks signature of the forward; needs NODE_FUNCTION_ALLOW_BUILTIN=crypto'),
		onError: 'continueErrorOutput',
	});
	w.link(hook, verify);
	// idem's 2xx comes from here, not from the Webhook on receipt: n8n answers only once an
	// execution runs and the forward is verified (see docs/n8n.md on an n8n that is starting).
	const ack = w.add(L.respond('Respond 200: received', [340, 120], { code: 200, body: `{ received: true, key: ${V}.key }` }));
	w.link(verify, ack, 0);
	// n8n 2.x answers 200 with an empty body when an execution fails before its first Respond
	// node (n8n issues #21827, #25340): the refusal is answered here instead, not as a failure.
	const refused = w.add(L.respond('Respond 401: not verified', [560, 480], { code: 401, body: '{ received: false, error: String($json.error) }' }));
	w.link(verify, refused, 1);
	const set = w.add(
		L.settings([560, 300], 'intake-effects', [
			['crm_url', "={{ $vars.CRM_URL || 'https://crm.example.invalid/contacts/upsert' }}"],
			['notify_url', "={{ $vars.NOTIFY_URL || 'https://chat.example.invalid/messages' }}"],
		]),
	);
	w.link(ack, set);

	const crm = intakeEffect(w, {
		label: 'crm',
		effectName: 'CRM upsert (replace me)',
		key: KEY_CRM,
		x: 780,
		y: 300,
		url: `={{ ${S}.crm_url }}`,
		body: `{ key: ${V}.key, source: ${V}.source, event: ${V}.event }`,
		notes: 'Stand-in for your CRM node. Pass the key on as the idempotency key where the API has one.',
	});
	w.link(set, crm.claim);
	const notify = intakeEffect(w, {
		label: 'notify',
		effectName: 'Notify the team (replace me)',
		key: KEY_NOTIFY,
		x: 1960,
		y: 300,
		url: `={{ ${S}.notify_url }}`,
		body: `{ key: ${V}.key, text: 'New event ' + ${V}.event_id + ' from ' + ${V}.source }`,
		notes: 'Stand-in for your Slack / mail node.',
	});
	// The second effect runs after the first was done now or before (a redelivery after a
	// partial failure redoes only what is missing).
	w.link(crm.done, notify.claim);
	w.link(crm.sw, notify.claim, OUT.duplicate);
	w.link(notify.sw, w.add(L.noop('Already done', [2440, 300])), OUT.duplicate);

	const busy = w.add(
		L.noop('Not now (another execution has it, or backing off)', [2440, 460], 'in_flight: the other execution of this event does the work. backoff: redeliver the event from idem after not_before.'),
	);
	const alert = w.add(
		L.noop('Alert a person (replace me)', [2440, 620], 'needs_review / conflict / failed_permanent: send key + state to on-call. No event bodies.'),
	);
	for (const sw of [crm.sw, notify.sw]) {
		w.link(sw, busy, OUT.busy);
		w.link(sw, alert, OUT.review);
		w.link(sw, alert, OUT.blocked);
	}

	const decide = w.add({
		name: 'What did idem decide?',
		type: 'n8n-nodes-base.switch',
		typeVersion: 3.2,
		position: [3140, 160],
		parameters: {
			rules: {
				values: [
					['Retry later', 'failed_retryable'],
					['Needs review', 'needs_review'],
					['Permanent', 'failed_permanent'],
				].map(([label, state]) => ({
					conditions: {
						options: { caseSensitive: true, leftValue: '', typeValidation: 'loose', version: 2 },
						conditions: [
							{ id: L.uuidFrom(`intake-decide/${state}`), leftValue: '={{ $json.state }}', rightValue: state, operator: { type: 'string', operation: 'equals' } },
						],
						combinator: 'and',
					},
					renameOutput: true,
					outputKey: label,
				})),
			},
			looseTypeValidation: true,
			options: {},
		},
	});
	for (const f of [...crm.fails, ...notify.fails]) w.link(f, decide);
	const later = w.add(
		L.noop('Retry: redeliver the event from idem', [3380, 60], 'POST /v1/sources/{source}/events/{key}/redeliver (after retry.not_before): same Idem-Key, the gate runs only what is missing.'),
	);
	w.link(decide, later, 0);
	w.link(decide, alert, 1);
	w.link(decide, alert, 2);

	const stop = w.add({
		name: 'Stop: gate unavailable',
		type: 'n8n-nodes-base.stopAndError',
		typeVersion: 1,
		position: [2440, 780],
		parameters: { errorMessage: '=idem did not answer the claim: {{ $json.error ? ($json.error.message || $json.error) : ($json.body && $json.body.code) }}' },
	});
	for (const { claim: c, sw } of [crm, notify]) {
		w.link(c, stop, 1);
		w.link(sw, stop, OUT.error);
	}
	return w;
}

// (h) One destination of an intake fan-out: one workflow per destination, each gating its one
// effect on its own Idem-Key ({event key}:{destination}) -------------------------------------------

const FANOUT_NOTE = [
	'## One destination of an idem fan-out',
	'idem receives the provider event once and delivers it to **each destination** of the source under its own key: `evt_1:crm`, `evt_1:receipt`, `evt_1:slack`. Import this workflow once per destination; each does **one** effect, gated on the signed `Idem-Key`.',
	'',
	'Source (PUT /v1/sources/stripe):',
	'```',
	'"forwards": {',
	'  "crm":     {"url": "<this Webhook\'s production URL>", "secret": "whsec_..."},',
	'  "receipt": {"url": "...", "filter": {"pointer": "/type", "in": ["invoice.paid"]}},',
	'  "slack":   {"url": "...", "rate": {"per_minute": 30}}',
	'}',
	'```',
	'Each destination has its own state, retries, dead letter and redeliver: when Slack fails, redeliver `{"destination": "slack"}` and only this workflow runs again.',
	'',
	'1. **Verify idem signature** (Raw Body on, `NODE_FUNCTION_ALLOW_BUILTIN=crypto`; `IDEM_FORWARD_SECRET` = this destination\'s `secret`).',
	'2. **Respond 200: received** at once.',
	'3. Claim the signed key itself (it already names the destination), do the effect, complete.',
	'',
	'Setup: credential **idem worker token**, Variables `IDEM_URL`, `IDEM_FORWARD_SECRET`, `EFFECT_URL`; replace the *(replace me)* node.',
].join('\n');

function intakeFanOutDestination() {
	const w = new L.Workflow({ id: 'idemTplIntakeFan', name: 'idem · one fan-out destination: verify, gate its one effect' });
	const V = "$('Verify idem signature').item.json";
	const KEY = `${V}.key`;
	w.add(L.sticky('About this template', FANOUT_NOTE, [-460, -100], { width: 560, height: 640 }));
	const hook = w.add(
		L.webhook('Event from idem', 'idem-intake-destination', [120, 300], { responseMode: 'responseNode', options: { rawBody: true } }),
	);
	const verify = w.add({
		...L.code('Verify idem signature', [340, 300], VERIFY_FORWARD_JS, 'Standard Webhooks signature of the forward; needs NODE_FUNCTION_ALLOW_BUILTIN=crypto'),
		onError: 'continueErrorOutput',
	});
	w.link(hook, verify);
	const ack = w.add(L.respond('Respond 200: received', [340, 120], { code: 200, body: `{ received: true, key: ${V}.key }` }));
	w.link(verify, ack, 0);
	const refused = w.add(L.respond('Respond 401: not verified', [560, 480], { code: 401, body: '{ received: false, error: String($json.error) }' }));
	w.link(verify, refused, 1);
	const set = w.add(
		L.settings([560, 300], 'intake-destination', [['effect_url', "={{ $vars.EFFECT_URL || 'https://effect.example.invalid/do' }}"]]),
	);
	w.link(ack, set);
	const eff = intakeEffect(w, {
		label: 'effect',
		effectName: 'The destination\'s effect (replace me)',
		key: KEY,
		x: 780,
		y: 300,
		url: `={{ ${S}.effect_url }}`,
		body: `{ key: ${V}.key, source: ${V}.source, event_id: ${V}.event_id, event: ${V}.event }`,
		notes: 'Stand-in for this destination\'s one effect (CRM upsert, receipt mail, Slack message). Pass the key on as the idempotency key where the API has one.',
	});
	w.link(set, eff.claim);
	w.link(eff.sw, w.add(L.noop('Already done', [1960, 300])), OUT.duplicate);
	const busy = w.add(
		L.noop('Not now (another execution has it, or backing off)', [1960, 460], 'in_flight: the other execution of this delivery does the work. backoff: redeliver this destination from idem after not_before.'),
	);
	const alert = w.add(
		L.noop('Alert a person (replace me)', [1960, 620], 'needs_review / conflict / failed_permanent: send key + state to on-call. No event bodies.'),
	);
	w.link(eff.sw, busy, OUT.busy);
	w.link(eff.sw, alert, OUT.review);
	w.link(eff.sw, alert, OUT.blocked);
	const later = w.add(
		L.noop('Retry: redeliver this destination from idem', [1960, 140], 'POST /v1/sources/{source}/events/{event key}/redeliver {"note": "...", "destination": "<name>"}: only this destination runs again.'),
	);
	for (const f of eff.fails) w.link(f, later);
	const stop = w.add({
		name: 'Stop: gate unavailable',
		type: 'n8n-nodes-base.stopAndError',
		typeVersion: 1,
		position: [1960, 780],
		parameters: { errorMessage: '=idem did not answer the claim: {{ $json.error ? ($json.error.message || $json.error) : ($json.body && $json.body.code) }}' },
	});
	w.link(eff.claim, stop, 1);
	w.link(eff.sw, stop, OUT.error);
	return w;
}

// Community-node example (also what the e2e test runs) ---------------------------------------------

function nodeWebhookExample() {
	const w = new L.Workflow({ id: 'idemNodeWebhook1', name: 'idem node · webhook → gated side effect' });
	const gate = (name, pos, parameters) => ({
		name,
		type: 'n8n-nodes-idem.idempotencyGate',
		typeVersion: 1,
		position: pos,
		parameters,
		credentials: { idemApi: { id: 'idemNodeCredent1', name: 'idem' } },
	});
	w.add(
		L.sticky(
			'About this example',
			'## Idempotency Gate node\n**Claim** has one output per answer: Proceed, Duplicate, Busy, Needs Review, Blocked.\nKey: `{event id}:effect`. **Complete** reads key and token from the claim node.\nCredential **idem** (Base URL + token).',
			[-420, -40],
			{ width: 400, height: 260 },
		),
	);
	const hook = w.add(L.webhook('Webhook', 'idem-node-events', [0, 300]));
	const claimName = w.add(
		gate('Claim', [220, 300], {
			operation: 'claim',
			namespace: 'n8n-node',
			key: "={{ $json.body.id }}:effect",
			fingerprintMode: 'payload',
			payload: '={{ $json.body }}',
			claimOptions: { waitMs: 10000 },
		}),
	);
	w.link(hook, claimName);
	const act = w.add(
		L.sideEffect('Side effect (replace me)', [500, 100], {
			url: "={{ $vars.EFFECT_URL || 'https://api.example.invalid/effects' }}",
			body: '{ event_id: $json.body.id }',
			idempotencyKey: '$json.idem.key',
		}),
	);
	delete w.nodes[w.nodes.length - 1].onError; // errors stop the run: the key stays leased, a retry reclaims it
	w.link(claimName, act, 0);
	const done = w.add(
		gate('Complete', [740, 100], {
			operation: 'complete',
			namespace: 'n8n-node',
			key: "={{ $('Claim').item.json.idem.key }}",
			leaseToken: "={{ $('Claim').item.json.idem.token }}",
			sendResult: true,
			result: '={{ { status: $json.statusCode } }}',
			externalRef: '',
		}),
	);
	w.nodes[w.nodes.length - 1].retryOnFail = true;
	w.link(act, done);
	const rDone = w.add(
		L.respond('Respond 200: processed', [960, 100], { code: 200, body: "{ received: true, status: 'processed', id: $('Webhook').item.json.body.id }" }),
	);
	w.link(done, rDone);
	const rDup = w.add(
		L.respond('Respond 200: duplicate', [500, 280], { code: 200, body: "{ received: true, status: 'duplicate', id: $json.body.id, result: $json.idem.record.result }" }),
	);
	w.link(claimName, rDup, 1);
	const rBusy = w.add(
		L.respond('Respond 409: busy', [500, 440], { code: 409, body: "{ received: false, status: $json.idem ? $json.idem.outcome : 'error', id: $json.body ? $json.body.id : null }" }),
	);
	w.link(claimName, rBusy, 2);
	const rPerson = w.add(
		L.respond('Respond: a person decides', [500, 600], {
			code: "={{ $json.idem.outcome === 'needs_review' ? 503 : 200 }}",
			body: "{ received: $json.idem.outcome !== 'needs_review', status: $json.idem.outcome, id: $json.body.id }",
		}),
	);
	w.link(claimName, rPerson, 3);
	w.link(claimName, rPerson, 4);
	return w;
}

// (f) Stripe charge via an effect: idem makes the call under the key (stock HTTP Request node) ---

const STRIPE_CHARGE_NOTE = [
	'## Charge once: let idem make the call',
	'One **effect** call replaces claim → Switch → charge → complete/fail. idem claims `order-{id}:charge`, sends the request to Stripe with the key as `Idempotency-Key` (the same value on every retry), stores Stripe\'s answer and replays it to every later call with the key.',
	'',
	'- **Performed** → charged now. **Duplicate** → charged before: the stored answer comes back (`Idempotent-Replayed`).',
	'- **Failed** → Stripe refused for good (402 card declined): replayed too, never re-sent.',
	'- **Retry later** → 429/503/connection refused: 409 + Retry-After to the caller; the next delivery resumes with the same key.',
	'- **Needs review** → only without `destination_idempotent` (a 5xx or timeout may have charged). Stripe dedupes by the key, so here a 5xx or timeout is retried safely instead.',
	'- **Blocked** → same order id, different amount: never sent.',
	'',
	'Setup: credential **idem worker token** (Header Auth: `Authorization` = `Bearer <token>`); n8n Variables `IDEM_URL`, `STRIPE_SECRET_KEY` and optionally `STRIPE_API_URL` (Variables are readable by everyone who edits workflows: use a restricted key). idem never stores, logs or returns the request headers. Stripe keeps idempotency keys 24 h: keep the namespace `retry_window_ms` below that. Optional egress policy on the namespace: `egress: {allow: ["api.stripe.com"]}`.',
].join('\n');

const STRIPE_REQUEST = (req) =>
	`{ method: 'POST', url: ${S}.stripe_url + '/v1/payment_intents', headers: { Authorization: 'Bearer ' + $vars.STRIPE_SECRET_KEY, 'Content-Type': 'application/x-www-form-urlencoded' }, body_text: 'amount=' + encodeURIComponent(${req}.amount) + '&currency=' + encodeURIComponent(${req}.currency || 'eur') + '&customer=' + encodeURIComponent(${req}.customer) + '&payment_method=' + encodeURIComponent(${req}.payment_method) + '&confirm=true&off_session=true&metadata[order_id]=' + encodeURIComponent(${req}.order_id) }`;

function effectResponds(w, from, outs, idExpr, pos) {
	const [x, y] = pos;
	const ok = w.add(
		L.respond('Respond 200: charged', [x, y], {
			code: 200,
			body: `{ received: true, status: $json.body.outcome === 'performed' ? 'charged' : 'already_charged', id: ${idExpr}, payment_intent: $json.body.response && $json.body.response.body ? $json.body.response.body.id : null }`,
		}),
	);
	w.link(from, ok, outs.performed);
	w.link(from, ok, outs.duplicate);
	const declined = w.add(
		L.respond('Respond 200: declined', [x, y + 160], {
			code: 200,
			body: `{ received: true, status: 'declined', id: ${idExpr}, stripe_status: $json.body.response ? $json.body.response.status : null }`,
		}),
	);
	w.link(from, declined, outs.failed);
	const busy = w.add(
		L.respond('Respond 409: retry later', [x, y + 320], {
			code: 409,
			body: `{ received: false, status: $json.body.outcome, retry_after_ms: $json.body.retry_after_ms, id: ${idExpr} }`,
			headers: [['Retry-After', '={{ Math.max(1, Math.ceil(($json.body.retry_after_ms || 5000) / 1000)) }}']],
		}),
	);
	w.link(from, busy, outs.retry);
	const person = w.add(
		L.respond('Respond: a person decides', [x, y + 480], {
			code: "={{ $json.body.outcome === 'needs_review' ? 503 : 200 }}",
			body: `{ received: $json.body.outcome !== 'needs_review', status: $json.body.outcome, id: ${idExpr} }`,
		}),
	);
	w.link(from, person, outs.review);
	w.link(from, person, outs.blocked);
	return { ok, busy, person };
}

function stripeChargeEffect() {
	const w = new L.Workflow({ id: 'idemTplEffectStr', name: 'idem · Stripe charge via effect (idem makes the call once)' });
	const REQ = "$('Order paid').item.json.body";
	const KEY = `'order-' + ${REQ}.order_id + ':charge'`;
	const ID = `${REQ}.order_id`;
	w.add(L.sticky('About this template', STRIPE_CHARGE_NOTE, [-440, -80], { width: 540, height: 600 }));
	const hook = w.add(L.webhook('Order paid', 'idem-effect-charge', [120, 300]));
	const set = w.add(
		L.settings([340, 300], 'charges', [['stripe_url', "={{ ($vars.STRIPE_API_URL || 'https://api.stripe.com').replace(/\\/+$/, '') }}"]]),
	);
	w.link(hook, set);
	const eff = w.add(
		L.effect('Charge via idem', [560, 300], KEY, {
			request: STRIPE_REQUEST(REQ),
			extra: ['destination_idempotent: true', 'wait_ms: 10000', `correlation_id: String(${REQ}.order_id)`],
		}),
	);
	w.link(set, eff);
	const sw = w.add(L.outcomeSwitch('charge: outcome?', [800, 280], L.EFFECT_OUTCOME_OUTPUTS));
	w.link(eff, sw, 0);
	effectResponds(w, sw, L.EFFECT_OUT, ID, [1060, 60]);
	const down = w.add(
		L.respond('Respond 503: idem unreachable', [800, 560], {
			code: 503,
			body: `{ received: false, status: 'gate_unavailable', id: ${ID} }`,
			headers: [['Retry-After', '30']],
		}),
	);
	w.link(eff, down, 1);
	// The switch's fallback (an answer without outcome: a refusal such as destination_forbidden).
	const refused = w.add(
		L.respond('Respond 500: refused by idem', [1060, 900], {
			code: 500,
			body: `{ received: false, status: $json.body.code || 'error', detail: $json.body.detail, id: ${ID} }`,
		}),
	);
	w.link(sw, refused, L.EFFECT_OUT.error);
	return w;
}

function nodeEffectExample() {
	const w = new L.Workflow({ id: 'idemNodeEffect01', name: 'idem node · Stripe charge via the Effect operation' });
	const REQ = "$('Order paid').item.json.body";
	w.add(
		L.sticky(
			'About this example',
			[
				'## Idempotency Gate node · Effect',
				'**Effect** has one output per outcome: Performed, Duplicate, Failed, Retry Later, Needs Review, Blocked. idem sends the request with the key as `Idempotency-Key` and replays the stored answer to every later call.',
				'Credential **idem** (Base URL + token); n8n Variable `STRIPE_SECRET_KEY` (a restricted key). Headers are sent, never stored.',
			].join('\n'),
			[-440, -60],
			{ width: 420, height: 300 },
		),
	);
	const hook = w.add(L.webhook('Order paid', 'idem-node-effect-charge', [0, 300]));
	const eff = w.add({
		name: 'Charge',
		type: 'n8n-nodes-idem.idempotencyGate',
		typeVersion: 1,
		position: [240, 300],
		parameters: {
			operation: 'effect',
			namespace: 'charges-node',
			key: `={{ 'order-' + ${REQ}.order_id + ':charge' }}`,
			effectMethod: 'POST',
			effectUrl: "={{ ($vars.STRIPE_API_URL || 'https://api.stripe.com').replace(/\\/+$/, '') + '/v1/payment_intents' }}",
			effectHeaders: {
				header: [
					{ name: 'Authorization', value: '={{ "Bearer " + $vars.STRIPE_SECRET_KEY }}' },
					{ name: 'Content-Type', value: 'application/x-www-form-urlencoded' },
				],
			},
			effectBodyMode: 'text',
			effectText: `={{ 'amount=' + encodeURIComponent(${REQ}.amount) + '&currency=' + encodeURIComponent(${REQ}.currency || 'eur') + '&customer=' + encodeURIComponent(${REQ}.customer) + '&payment_method=' + encodeURIComponent(${REQ}.payment_method) + '&confirm=true&off_session=true&metadata[order_id]=' + encodeURIComponent(${REQ}.order_id) }}`,
			effectOptions: { destinationIdempotent: 'yes', waitMs: 10000, correlationId: `={{ String(${REQ}.order_id) }}` },
		},
		credentials: { idemApi: { id: 'idemNodeCredent1', name: 'idem' } },
	});
	w.link(hook, eff);
	const ID = `${REQ}.order_id`;
	const out = { performed: 0, duplicate: 1, failed: 2, retry: 3, review: 4, blocked: 5 };
	const [x, y] = [520, 0];
	const ok = w.add(
		L.respond('Respond 200: charged', [x, y], {
			code: 200,
			body: `{ received: true, status: $json.idem.outcome === 'performed' ? 'charged' : 'already_charged', id: ${ID}, payment_intent: $json.idem.response && $json.idem.response.body ? $json.idem.response.body.id : null }`,
		}),
	);
	w.link(eff, ok, out.performed);
	w.link(eff, ok, out.duplicate);
	const declined = w.add(
		L.respond('Respond 200: declined', [x, y + 160], {
			code: 200,
			body: `{ received: true, status: 'declined', id: ${ID}, stripe_status: $json.idem.response ? $json.idem.response.status : null }`,
		}),
	);
	w.link(eff, declined, out.failed);
	const busy = w.add(
		L.respond('Respond 409: retry later', [x, y + 320], {
			code: 409,
			body: `{ received: false, status: $json.idem.outcome, id: ${ID} }`,
			headers: [['Retry-After', '={{ Math.max(1, Math.ceil(($json.idem.retry_after_ms || 5000) / 1000)) }}']],
		}),
	);
	w.link(eff, busy, out.retry);
	const person = w.add(
		L.respond('Respond: a person decides', [x, y + 480], {
			code: "={{ $json.idem.outcome === 'needs_review' ? 503 : 200 }}",
			body: `{ received: $json.idem.outcome !== 'needs_review', status: $json.idem.outcome, id: ${ID} }`,
		}),
	);
	w.link(eff, person, out.review);
	w.link(eff, person, out.blocked);
	return w;
}

// Derive Key → Effect on a single output: the shape an AI agent tool sees (one answer, with
// idem.route and a sentence), here behind a webhook so the end-to-end test can drive it.
function nodeDeriveSingleExample() {
	const w = new L.Workflow({ id: 'idemNodeDerive01', name: 'idem node · Derive Key → Effect, single output' });
	const REQ = "$('Refund requested').item.json.body";
	w.add(
		L.sticky(
			'About this example',
			[
				'## Idempotency Gate node · Derive Key + single output',
				'**Derive Key** builds the key from identity fields of the event (`/order_id` → `refund:<order id>`): the same order always gives the same key, whoever retries — a provider, n8n, or an AI agent calling this as a tool.',
				'**Effect** with *Output Mode: Single Output* answers on one output with `idem.route` (performed, duplicate, failed, retry_later, needs_review, blocked) and a one-sentence `idem.summary`; as an agent tool the node always answers this way.',
			].join('\n'),
			[-440, -60],
			{ width: 420, height: 320 },
		),
	);
	const hook = w.add(L.webhook('Refund requested', 'idem-node-derive-refund', [0, 300]));
	const derive = w.add({
		name: 'Derive key',
		type: 'n8n-nodes-idem.idempotencyGate',
		typeVersion: 1,
		position: [220, 300],
		parameters: {
			resource: 'event',
			operation: 'deriveKey',
			deriveEvent: '={{ $json.body }}',
			deriveFields: '/order_id',
			deriveOptions: { prefix: 'refund' },
		},
		credentials: { idemApi: { id: 'idemNodeCredent1', name: 'idem' } },
	});
	w.link(hook, derive);
	const eff = w.add({
		name: 'Refund',
		type: 'n8n-nodes-idem.idempotencyGate',
		typeVersion: 1,
		position: [440, 300],
		parameters: {
			operation: 'effect',
			namespace: 'refunds-node',
			key: '={{ $json.idem.key }}',
			outputMode: 'single',
			effectMethod: 'POST',
			effectUrl: "={{ $vars.EFFECT_URL || 'https://api.example.invalid/refunds' }}",
			effectBodyMode: 'json',
			effectJson: `={{ { order_id: ${REQ}.order_id, amount: ${REQ}.amount } }}`,
			effectOptions: { destinationIdempotent: 'yes', waitMs: 10000 },
		},
		credentials: { idemApi: { id: 'idemNodeCredent1', name: 'idem' } },
	});
	w.link(derive, eff);
	const answer = w.add(
		L.respond('Respond with the route', [680, 300], {
			code: 200,
			body: '{ status: $json.idem.route, key: $json.idem.key, summary: $json.idem.summary }',
		}),
	);
	w.link(eff, answer);
	return w;
}

// Idem Intake Trigger → gate → side effect: the receiving end of the intake in one node. The
// trigger checks idem's forward signature (credential: Forward Secret) and answers idem when
// the workflow has finished, so idem's 2xx means an execution ran; a forgery gets 401 and no
// execution. One claim per side effect, keyed {event key}:effect.
function nodeIntakeTriggerExample() {
	const w = new L.Workflow({ id: 'idemNodeIntake01', name: 'idem node · intake forward → trigger → gated side effect' });
	const cred = { idemApi: { id: 'idemNodeCredent1', name: 'idem' } };
	const gate = (name, pos, parameters) => ({
		name,
		type: 'n8n-nodes-idem.idempotencyGate',
		typeVersion: 1,
		position: pos,
		parameters,
		credentials: cred,
	});
	w.add(
		L.sticky(
			'About this example',
			"## Idem Intake Trigger\nReceives idem's intake forwards: checks idem's signature with the credential's **Forward Secret** (a forgery gets 401 and starts nothing), then one claim per side effect, keyed `{event key}:effect`.\nidem hears 2xx once the workflow has finished.",
			[-420, -40],
			{ width: 400, height: 260 },
		),
	);
	const trigger = w.add({
		name: 'Idem Intake Trigger',
		type: 'n8n-nodes-idem.idemIntakeTrigger',
		typeVersion: 1,
		position: [0, 300],
		webhookId: '9e3c1f0a-7b2d-4e8f-a1c4-5d6e7f8a9b0c',
		parameters: { path: 'idem-node-intake', respond: 'lastNode', options: {} },
		credentials: cred,
	});
	const claimName = w.add(
		gate('Claim', [220, 300], {
			operation: 'claim',
			namespace: 'n8n-node-intake',
			key: '={{ $json.key }}:effect',
			fingerprintMode: 'none',
			claimOptions: { waitMs: 10000 },
		}),
	);
	w.link(trigger, claimName);
	const act = w.add(
		L.sideEffect('Side effect (replace me)', [500, 200], {
			url: "={{ $vars.EFFECT_URL || 'https://api.example.invalid/effects' }}",
			body: "{ event: $('Idem Intake Trigger').item.json.body, attempt: $('Idem Intake Trigger').item.json.attempt }",
			idempotencyKey: '$json.idem.key',
		}),
	);
	delete w.nodes[w.nodes.length - 1].onError; // an error fails the run: idem retries the forward, the claim decides
	w.link(claimName, act, 0);
	const done = w.add(
		gate('Complete', [740, 200], {
			operation: 'complete',
			namespace: 'n8n-node-intake',
			key: "={{ $('Claim').item.json.idem.key }}",
			leaseToken: "={{ $('Claim').item.json.idem.token }}",
			sendResult: true,
			result: '={{ { status: $json.statusCode } }}',
			externalRef: '',
		}),
	);
	w.nodes[w.nodes.length - 1].retryOnFail = true;
	w.link(act, done);
	return w;
}

// ------------------------------------------------------------------------------------------------

const OUTPUTS = [
	[path.join(TEMPLATES, 'stripe-webhook-crm-receipt.json'), stripeWebhook],
	[path.join(TEMPLATES, 'ai-draft-approval-deliver.json'), aiDraftApproval],
	[path.join(TEMPLATES, 'ai-agent-mcp-approval.json'), aiAgentMcpApproval],
	[path.join(TEMPLATES, 'cron-sweep-job-date.json'), cronSweep],
	[path.join(TEMPLATES, 'fan-out-one-key-per-effect.json'), fanOut],
	[path.join(TEMPLATES, 'error-branch-fail-classify.json'), errorBranch],
	[path.join(TEMPLATES, 'stripe-charge-via-effect.json'), stripeChargeEffect],
	[path.join(TEMPLATES, 'intake-forward-gate-effects.json'), intakeForward],
	[path.join(TEMPLATES, 'intake-fan-out-destinations.json'), intakeFanOutDestination],
	[path.join(EXAMPLES, 'webhook-gate-node.json'), nodeWebhookExample],
	[path.join(EXAMPLES, 'stripe-charge-effect-node.json'), nodeEffectExample],
	[path.join(EXAMPLES, 'derive-key-single-output-node.json'), nodeDeriveSingleExample],
	[path.join(EXAMPLES, 'intake-trigger-node.json'), nodeIntakeTriggerExample],
	[path.join(E2E_WORKFLOWS, 'mcp-client-node.json'), e2eMcpClientNode],
];

function main() {
	const check = process.argv.includes('--check');
	let stale = 0;
	for (const [file, build] of OUTPUTS) {
		const text = JSON.stringify(build().toJSON(), null, '\t') + '\n';
		if (check) {
			const cur = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
			if (cur !== text) {
				console.error(`stale: ${path.relative(process.cwd(), file)} (run node integrations/n8n/tools/generate-templates.js)`);
				stale++;
			}
		} else {
			fs.mkdirSync(path.dirname(file), { recursive: true });
			fs.writeFileSync(file, text);
			console.log(`wrote ${path.relative(process.cwd(), file)}`);
		}
	}
	if (stale) process.exit(1);
}

if (require.main === module) main();
module.exports = { OUTPUTS, VERIFY_FORWARD_JS };
