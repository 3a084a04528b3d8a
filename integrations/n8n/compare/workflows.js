#!/usr/bin/env node
// The comparison's workflows: one per means of deduplication an n8n user has, each built the
// way the n8n articles and forum answers build it, all doing the same side effect (one POST to
// the counting sink, key `<means>:<event id>` in the Idempotency-Key header) for the same
// event. Written as importable n8n workflow JSON:
//   node workflows.js OUT_DIR
// Each workflow's Webhook answers when the execution ends (Respond: When Last Node Finishes),
// so a delivery's answer means its execution is over; a failed execution answers 500 and the
// "provider" (the harness) delivers again.
//
// The crash: a Code node ("Crash point") that throws when the delivery carries `x-crash: 1`
// (or, behind the intake, when the event says `crash: true` and it is idem's first forward
// attempt). It sits where the means has a gap between its bookkeeping and the effect: after
// the mark and before the effect for the means that mark first (Remove Duplicates, Data
// table, static data, Redis, Postgres), after the effect and before `complete` for the gate.
// An execution that ends there leaves the durable state exactly as a process that died there
// would, except for workflow static data (see docs/comparison.md).
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const [outDir] = process.argv.slice(2);
if (!outDir) {
	console.error('usage: node workflows.js OUT_DIR');
	process.exit(2);
}

const EVENT = "$('Webhook').first().json.body";
// Credential references; run.sh imports credentials with these ids.
const CRED = {
	idemApi: { idemApi: { id: 'cmpIdemCredent01', name: 'idem (comparison)' } },
	redis: { redis: { id: 'cmpRedisCredent1', name: 'redis (comparison)' } },
	postgres: { postgres: { id: 'cmpPostgresCred1', name: 'postgres (comparison)' } },
};

let uuidSeq = 0;
function uuid(prefix) {
	uuidSeq += 1;
	const n = String(uuidSeq).padStart(12, '0');
	return `${prefix}-0000-4000-8000-${n}`;
}

function node(name, type, typeVersion, parameters, x, extra = {}) {
	return { id: uuid('c0c0c0c0'), name, type, typeVersion, position: [x, 0], parameters, ...extra };
}

function webhook(pathName) {
	return node(
		'Webhook',
		'n8n-nodes-base.webhook',
		2,
		// allEntries: a branch that ends with no items still answers 200 (with []).
		{
			httpMethod: 'POST',
			path: pathName,
			responseMode: 'lastNode',
			responseData: 'allEntries',
			options: {},
		},
		0,
		{ webhookId: uuid('5eb5eb00') },
	);
}

// The crash point (see the header). Runs once for all items.
function crashPoint(x) {
	return node(
		'Crash point',
		'n8n-nodes-base.code',
		2,
		{
			jsCode: [
				"const wh = $('Webhook').first().json;",
				'const h = wh.headers || {};',
				"const crash = h['x-crash'] === '1' || (wh.body && wh.body.crash === true && h['idem-attempt'] === '1');",
				"if (crash) throw new Error('simulated crash between the bookkeeping and the effect');",
				'return $input.all();',
			].join('\n'),
		},
		x,
	);
}

// The side effect: one POST to the sink. A timeout (2 s) fails the node (the sink counts the
// request on arrival, so a timed-out request did act, as a payment API may have).
function effect(means, x, extra = {}) {
	return node(
		'Side effect',
		'n8n-nodes-base.httpRequest',
		4.2,
		{
			method: 'POST',
			url: `={{ $vars.SINK_URL }}/effect?slow={{ ${EVENT}.slow ? 1 : 0 }}`,
			sendHeaders: true,
			headerParameters: {
				parameters: [{ name: 'Idempotency-Key', value: `=${means}:{{ ${EVENT}.id }}` }],
			},
			sendBody: true,
			specifyBody: 'json',
			jsonBody: `={{ JSON.stringify({ event_id: ${EVENT}.id }) }}`,
			options: { timeout: 2000 },
		},
		x,
		extra,
	);
}

// A Code node that passes its input on only when JS_TEST (over `items`) is true.
function onlyIf(name, test, x) {
	return node(
		name,
		'n8n-nodes-base.code',
		2,
		{ jsCode: `const items = $input.all();\nreturn (${test}) ? [{ json: { new: true } }] : [];` },
		x,
	);
}

function workflow(id, name, nodes, edges) {
	const connections = {};
	for (const [from, to, output = 0] of edges) {
		connections[from] ??= { main: [] };
		const main = connections[from].main;
		while (main.length <= output) main.push([]);
		main[output].push({ node: to, type: 'main', index: 0 });
	}
	return {
		id,
		name,
		nodes,
		connections,
		active: false,
		settings: {
			executionOrder: 'v1',
			saveDataSuccessExecution: 'all',
			saveDataErrorExecution: 'all',
		},
		pinData: {},
	};
}

function chain(names) {
	const edges = [];
	for (let i = 1; i < names.length; i += 1) edges.push([names[i - 1], names[i]]);
	return edges;
}

const W = {};

// 1. Remove Duplicates, "Remove Items Processed in Previous Executions", keyed by the event id.
W.removedup = workflow(
	'cmpRemoveDupes01',
	'compare · Remove Duplicates across executions',
	[
		webhook('cmp-removedup'),
		node(
			'Remove Duplicates',
			'n8n-nodes-base.removeDuplicates',
			2,
			{
				operation: 'removeItemsSeenInPreviousExecutions',
				logic: 'removeItemsWithAlreadySeenKeyValues',
				dedupeValue: '={{ $json.body.id }}',
				options: { scope: 'workflow', historySize: 100000 },
			},
			220,
		),
		crashPoint(440),
		effect('removedup', 660),
	],
	chain(['Webhook', 'Remove Duplicates', 'Crash point', 'Side effect']),
);

// 2. Data table "processed_events" (column event_id): "If Row Does Not Exist" passes the
//    item on only when no row has the id; insert it, then act.
const TABLE = { __rl: true, mode: 'name', value: 'processed_events' };
W.datatable = workflow(
	'cmpDataTable0001',
	'compare · Data table lookup then insert',
	[
		webhook('cmp-datatable'),
		node(
			'If row does not exist',
			'n8n-nodes-base.dataTable',
			1,
			{
				resource: 'row',
				operation: 'rowNotExists',
				dataTableId: TABLE,
				filters: { conditions: [{ keyName: 'event_id', keyValue: `={{ $json.body.id }}` }] },
			},
			220,
		),
		node(
			'Insert row',
			'n8n-nodes-base.dataTable',
			1,
			{
				resource: 'row',
				operation: 'insert',
				dataTableId: TABLE,
				columns: {
					mappingMode: 'defineBelow',
					value: { event_id: `={{ ${EVENT}.id }}` },
					matchingColumns: [],
					schema: [
						{
							id: 'event_id',
							displayName: 'event_id',
							required: false,
							defaultMatch: false,
							display: true,
							type: 'string',
							canBeUsedToMatch: true,
						},
					],
					attemptToConvertTypes: false,
					convertFieldsToString: false,
				},
				options: {},
			},
			440,
		),
		crashPoint(660),
		effect('datatable', 880),
	],
	chain(['Webhook', 'If row does not exist', 'Insert row', 'Crash point', 'Side effect']),
);

// 3. Workflow static data: a Code node remembers seen ids in $getWorkflowStaticData('global').
W.staticdata = workflow(
	'cmpStaticData001',
	'compare · workflow static data',
	[
		webhook('cmp-staticdata'),
		node(
			'Seen before?',
			'n8n-nodes-base.code',
			2,
			{
				jsCode: [
					"const seen = $getWorkflowStaticData('global');",
					"const id = $('Webhook').first().json.body.id;",
					'seen.ids = seen.ids || {};',
					'if (seen.ids[id]) return [];',
					'seen.ids[id] = Date.now();',
					'return [{ json: { new: true } }];',
				].join('\n'),
			},
			220,
		),
		crashPoint(440),
		effect('staticdata', 660),
	],
	chain(['Webhook', 'Seen before?', 'Crash point', 'Side effect']),
);

// 4. Redis. The Redis node's Set has no NX flag (n8n 2.8.4, 2.41.1); its Increment (INCR, then
//    EXPIRE) is the atomic first-writer test the node offers: the caller that reads 1 acts.
W.redis = workflow(
	'cmpRedisIncr0001',
	'compare · Redis (INCR: the first writer acts)',
	[
		webhook('cmp-redis'),
		node(
			'INCR seen key',
			'n8n-nodes-base.redis',
			1,
			{ operation: 'incr', key: `=seen:{{ ${EVENT}.id }}`, expire: true, ttl: 86400 },
			220,
			{ credentials: CRED.redis },
		),
		onlyIf('First writer?', `items.length > 0 && Object.values(items[0].json)[0] === 1`, 440),
		crashPoint(660),
		effect('redis', 880),
	],
	chain(['Webhook', 'INCR seen key', 'First writer?', 'Crash point', 'Side effect']),
);

// 5. Postgres: INSERT … ON CONFLICT DO NOTHING RETURNING; act only when a row came back.
W.postgres = workflow(
	'cmpPostgresOnCf1',
	'compare · Postgres INSERT ON CONFLICT DO NOTHING',
	[
		webhook('cmp-postgres'),
		node(
			'Insert event id',
			'n8n-nodes-base.postgres',
			2.6,
			{
				operation: 'executeQuery',
				query:
					'INSERT INTO processed_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING event_id',
				options: { queryReplacement: `={{ ${EVENT}.id }}` },
			},
			220,
			{ credentials: CRED.postgres, alwaysOutputData: true },
		),
		onlyIf('Row returned?', 'items.length > 0 && items[0].json.event_id', 440),
		crashPoint(660),
		effect('postgres', 880),
	],
	chain(['Webhook', 'Insert event id', 'Row returned?', 'Crash point', 'Side effect']),
);

// 6. The idem gate node: claim (lease 3 s; an expired lease goes to review) → effect →
//    complete; a failed effect is reported with `fail` (a timeout → needs_review).
function gateWorkflow(id, name, pathName, namespace, means) {
	return workflow(
		id,
		name,
		[
			webhook(pathName),
			node(
				'Claim',
				'n8n-nodes-idem.idempotencyGate',
				1,
				{
					operation: 'claim',
					namespace,
					key: `=${means}:{{ ${EVENT}.id }}`,
					fingerprintMode: 'payload',
					payload: `={{ { id: ${EVENT}.id } }}`,
					claimOptions: { leaseMs: 3000, leaseExpiry: 'review', waitMs: 10000 },
				},
				220,
				{ credentials: CRED.idemApi },
			),
			effect(means, 440, { onError: 'continueErrorOutput' }),
			crashPoint(660),
			node(
				'Complete',
				'n8n-nodes-idem.idempotencyGate',
				1,
				{
					operation: 'complete',
					namespace,
					key: "={{ $('Claim').item.json.idem.key }}",
					leaseToken: "={{ $('Claim').item.json.idem.token }}",
					sendResult: true,
					result: '={{ { done: true } }}',
					externalRef: '',
				},
				880,
				{ credentials: CRED.idemApi, retryOnFail: true },
			),
			node(
				'Fail',
				'n8n-nodes-idem.idempotencyGate',
				1,
				{
					operation: 'fail',
					namespace,
					key: "={{ $('Claim').item.json.idem.key }}",
					leaseToken: "={{ $('Claim').item.json.idem.token }}",
					kind: 'auto',
					category: 'timeout',
				},
				660,
				{ credentials: CRED.idemApi },
			),
		],
		[
			['Webhook', 'Claim', 0],
			['Claim', 'Side effect', 0],
			['Side effect', 'Crash point', 0],
			['Side effect', 'Fail', 1],
			['Crash point', 'Complete', 0],
		],
	);
}
W.gate = gateWorkflow(
	'cmpIdemGateNode1',
	'compare · idem gate node',
	'cmp-gate',
	'compare-gate',
	'gate',
);

// 7. An idem effect: idem makes the call itself and records the answer with it.
W.effect = workflow(
	'cmpIdemEffect001',
	'compare · idem effect',
	[
		webhook('cmp-effect'),
		node(
			'Effect',
			'n8n-nodes-idem.idempotencyGate',
			1,
			{
				operation: 'effect',
				namespace: 'compare-effect',
				key: `=effect:{{ ${EVENT}.id }}`,
				fingerprintMode: 'payload',
				payload: `={{ { id: ${EVENT}.id } }}`,
				effectMethod: 'POST',
				effectUrl: `={{ $vars.SINK_URL }}/effect?slow={{ ${EVENT}.slow ? 1 : 0 }}`,
				effectBodyMode: 'json',
				effectJson: `={{ { event_id: ${EVENT}.id } }}`,
				effectOptions: { destinationIdempotent: 'no', timeoutMs: 2000, waitMs: 10000 },
			},
			220,
			{ credentials: CRED.idemApi },
		),
		crashPoint(440),
	],
	chain(['Webhook', 'Effect', 'Crash point']),
);

// 8. The intake in front: idem verifies, dedupes and forwards; the receiving workflow gates
//    the effect like 6 (its own namespace and key).
W.intake = gateWorkflow(
	'cmpIntakeGate001',
	'compare · intake in front (forward → gate)',
	'cmp-intake',
	'compare-intake-fx',
	'intake',
);

fs.mkdirSync(outDir, { recursive: true });
for (const [means, wf] of Object.entries(W)) {
	fs.writeFileSync(path.join(outDir, `${means}.json`), `${JSON.stringify(wf, null, '\t')}\n`);
}
console.log(Object.keys(W).join(' '));
