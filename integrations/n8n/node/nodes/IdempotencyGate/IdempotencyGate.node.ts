import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type IHttpRequestOptions,
	type INodeExecutionData,
	type INodeParameters,
	type INodeType,
	type INodeTypeDescription,
} from 'n8n-workflow';

import {
	CLAIM_OUTPUT_NAMES,
	CLAIM_ROUTES,
	EFFECT_OUTPUT,
	EFFECT_OUTPUT_NAMES,
	EFFECT_ROUTES,
	OUTPUT,
	claimBody,
	completeBody,
	costMember,
	deriveBody,
	describeProblem,
	effectBody,
	effectOutputForOutcome,
	failBody,
	keyProblem,
	keyUrl,
	namespaceProblem,
	outputForOutcome,
	parseBody,
	prepareBody,
	requireToken,
	routeSummary,
	transportDetail,
	type EffectParams,
	type FailParams,
} from './gate';

/**
 * Outputs depend on the operation: Claim and Effect show one output per kind of answer so the
 * canvas shows every path (unless Output Mode is Single Output); everything else has one.
 * Evaluated by n8n from its source text, so it must not reference anything outside itself.
 */
const configuredOutputs = (parameters: INodeParameters) => {
	const single = [{ type: 'main' }];
	if ((parameters.resource ?? 'key') !== 'key' || parameters.outputMode === 'single') return single;
	if ((parameters.operation ?? 'claim') === 'claim') {
		return ['Proceed', 'Duplicate', 'Busy', 'Needs Review', 'Blocked'].map((displayName) => ({
			type: 'main',
			displayName,
		}));
	}
	if (parameters.operation === 'effect') {
		return ['Performed', 'Duplicate', 'Failed', 'Retry Later', 'Needs Review', 'Blocked'].map(
			(displayName) => ({
				type: 'main',
				displayName,
			}),
		);
	}
	return single;
};

const SIDE_EFFECT_KEY_HINT =
	'Identify the business operation, never the attempt: the provider event id plus the side effect, e.g. {{ $json.body.id }}:crm. Never $execution.id.';

/** The name n8n gives the AI-agent-tool variant of a node ends with "Tool". */
const TOOL_SUFFIX = 'Tool';

/** Time for idem itself on top of what the request asks it to wait for. */
const REQUEST_SLACK_MS = 10000;

export class IdempotencyGate implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Idempotency Gate',
		name: 'idempotencyGate',
		icon: { light: 'file:idem.svg', dark: 'file:idem.dark.svg' },
		group: ['transform'],
		version: 1,
		subtitle: '={{ $parameter["operation"] }}',
		description:
			'Ask idem before an irreversible side effect (claim, or let it make the call: effect) and tell it what happened (complete / fail)',
		defaults: {
			name: 'Idempotency Gate',
		},
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: `={{(${configuredOutputs})($parameter)}}`,
		credentials: [
			{
				name: 'idemApi',
				required: true,
			},
		],
		properties: [
			{
				displayName: 'Resource',
				name: 'resource',
				type: 'options',
				noDataExpression: true,
				options: [
					{
						name: 'Event',
						value: 'event',
						description: 'Derive a stable key from the identity fields of an event',
					},
					{
						name: 'Key',
						value: 'key',
						description: 'Claim, effect, prepare, complete or fail one idempotency key',
					},
				],
				default: 'key',
			},
			{
				displayName: 'Operation',
				name: 'operation',
				type: 'options',
				noDataExpression: true,
				displayOptions: { show: { resource: ['key'] } },
				options: [
					{
						name: 'Claim',
						value: 'claim',
						description:
							'Ask whether the side effect may run now; routes to Proceed, Duplicate, Busy, Needs Review or Blocked',
						action: 'Claim a key before a side effect',
					},
					{
						name: 'Complete',
						value: 'complete',
						description: 'Record that the side effect happened (safe to retry)',
						action: 'Complete a claimed key',
					},
					{
						name: 'Effect',
						value: 'effect',
						description:
							'Let idem make the HTTP call under the key (sent once, with the key as Idempotency-Key; duplicates get the stored response); routes to Performed, Duplicate, Failed, Retry Later, Needs Review or Blocked',
						action: 'Make an HTTP call exactly once under a key',
					},
					{
						name: 'Fail',
						value: 'fail',
						description:
							'Record that the side effect failed; idem classifies it and says whether a retry is allowed',
						action: 'Fail a claimed key',
					},
					{
						name: 'Prepare',
						value: 'prepare',
						description:
							'Save the payload to deliver (e.g. an AI draft) so every later attempt reuses it',
						action: 'Prepare the payload of a claimed key',
					},
				],
				default: 'claim',
			},
			{
				displayName: 'Operation',
				name: 'operation',
				type: 'options',
				noDataExpression: true,
				displayOptions: { show: { resource: ['event'] } },
				options: [
					{
						name: 'Derive Key',
						value: 'deriveKey',
						description:
							'Build the key from identity fields of the event (hashed when long or personal); a missing field is an error, never "no key"',
						action: 'Derive a key from an event',
					},
				],
				default: 'deriveKey',
			},
			{
				displayName: 'Namespace',
				name: 'namespace',
				type: 'string',
				default: 'n8n',
				required: true,
				displayOptions: { show: { resource: ['key'] } },
				description:
					'Scope of the keys (e.g. one per workflow or tenant). Letters, digits and . _ - : only.',
			},
			// ---- claim
			{
				displayName: 'Key',
				name: 'key',
				type: 'string',
				default: '={{ $json.body ? $json.body.id : $json.id }}',
				required: true,
				displayOptions: { show: { resource: ['key'], operation: ['claim', 'effect'] } },
				description: SIDE_EFFECT_KEY_HINT,
			},
			{
				displayName: 'Output Mode',
				name: 'outputMode',
				type: 'options',
				default: 'routes',
				displayOptions: { show: { resource: ['key'], operation: ['claim', 'effect'] } },
				options: [
					{
						name: 'One Output per Outcome',
						value: 'routes',
						description:
							'Each kind of answer leaves on its own output, so the canvas shows every path',
					},
					{
						name: 'Single Output (for AI Agents)',
						value: 'single',
						description:
							'Every answer leaves on one output with idem.route and a one-sentence idem.summary; always used when the node runs as an AI agent tool',
					},
				],
				description:
					'As an agent tool, form the key from identity arguments that stay the same when the agent retries, e.g. {{ "refund:" + $fromAI("order_ID") }}; never let the agent invent the key',
			},
			{
				displayName: 'Fingerprint',
				name: 'fingerprintMode',
				type: 'options',
				default: 'payload',
				displayOptions: { show: { operation: ['claim'] } },
				options: [
					{
						name: 'From Payload',
						value: 'payload',
						description:
							'Idem fingerprints the payload; the same key with a different payload is a conflict (Blocked)',
					},
					{
						name: 'Precomputed',
						value: 'fingerprint',
						description: 'SHA-256 hex of the JCS-canonical payload, computed elsewhere',
					},
					{
						name: 'None',
						value: 'none',
						description: 'Do not check that repeats carry the same data',
					},
				],
			},
			{
				displayName: 'Payload',
				name: 'payload',
				type: 'json',
				default: '={{ $json.body !== undefined ? $json.body : $json }}',
				displayOptions: { show: { operation: ['claim'], fingerprintMode: ['payload'] } },
				description:
					'The business data of the operation. For webhooks the body, not the headers (signatures and timestamps change on every delivery).',
			},
			{
				displayName: 'Fingerprint Value',
				name: 'fingerprint',
				type: 'string',
				default: '',
				displayOptions: { show: { operation: ['claim'], fingerprintMode: ['fingerprint'] } },
			},
			{
				displayName: 'Options',
				name: 'claimOptions',
				type: 'collection',
				placeholder: 'Add option',
				default: {},
				displayOptions: { show: { operation: ['claim'] } },
				options: [
					{
						displayName: 'Correlation ID',
						name: 'correlationId',
						type: 'string',
						default: '',
					},
					{
						displayName: 'Lease (Ms)',
						name: 'leaseMs',
						type: 'number',
						typeOptions: { minValue: 0 },
						default: 0,
						description:
							'How long the claim is held before another attempt may take over. 0 = namespace default (30 s).',
					},
					{
						displayName: 'Lease Expiry',
						name: 'leaseExpiry',
						type: 'options',
						default: '',
						options: [
							{ name: 'Namespace Default', value: '' },
							{ name: 'Reclaim (Next Claim Resumes)', value: 'reclaim' },
							{ name: 'Review (a Person Decides; for Money)', value: 'review' },
						],
					},
					{
						displayName: 'Owner',
						name: 'owner',
						type: 'string',
						default: '',
						description: 'Recorded on the key for the audit trail. Default: the n8n execution ID.',
					},
					{
						displayName: 'Wait (Ms)',
						name: 'waitMs',
						type: 'number',
						typeOptions: { minValue: 0, maxValue: 30000 },
						default: 0,
						description:
							'Instead of an immediate Busy, wait up to this long for the holder to finish (max 30000)',
					},
				],
			},
			// ---- effect
			{
				displayName: 'Method',
				name: 'effectMethod',
				type: 'options',
				default: 'POST',
				displayOptions: { show: { operation: ['effect'] } },
				options: [
					{ name: 'DELETE', value: 'DELETE' },
					{ name: 'PATCH', value: 'PATCH' },
					{ name: 'POST', value: 'POST' },
					{ name: 'PUT', value: 'PUT' },
				],
			},
			{
				displayName: 'URL',
				name: 'effectUrl',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'https://api.stripe.com/v1/payment_intents',
				displayOptions: { show: { operation: ['effect'] } },
				description:
					'Where idem sends the request. The destination must be allowed by the namespace egress policy (private and loopback addresses are refused unless listed).',
			},
			{
				displayName: 'Headers',
				name: 'effectHeaders',
				type: 'fixedCollection',
				typeOptions: { multipleValues: true },
				default: {},
				displayOptions: { show: { operation: ['effect'] } },
				description:
					'Sent with the request and never stored, logged or returned by idem (credentials belong here, e.g. Authorization)',
				options: [
					{
						name: 'header',
						displayName: 'Header',
						values: [
							{ displayName: 'Name', name: 'name', type: 'string', default: '' },
							{
								displayName: 'Value',
								name: 'value',
								type: 'string',
								typeOptions: { password: true },
								default: '',
							},
						],
					},
				],
			},
			{
				displayName: 'Body',
				name: 'effectBodyMode',
				type: 'options',
				default: 'json',
				displayOptions: { show: { operation: ['effect'] } },
				options: [
					{ name: 'JSON', value: 'json' },
					{ name: 'Text (e.g. Form-Encoded)', value: 'text' },
					{ name: 'None', value: 'none' },
				],
				description:
					'The request body; it is part of the fingerprint, so a second call with the same key and a different body is a conflict and is never sent',
			},
			{
				displayName: 'JSON Body',
				name: 'effectJson',
				type: 'json',
				default: '={{ $json.body ? $json.body : $json }}',
				displayOptions: { show: { operation: ['effect'], effectBodyMode: ['json'] } },
			},
			{
				displayName: 'Text Body',
				name: 'effectText',
				type: 'string',
				default: '',
				displayOptions: { show: { operation: ['effect'], effectBodyMode: ['text'] } },
				description:
					'Sent as is; set a Content-Type header (e.g. application/x-www-form-urlencoded for Stripe)',
			},
			{
				displayName: 'Effect Options',
				name: 'effectOptions',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				displayOptions: { show: { operation: ['effect'] } },
				options: [
					{
						displayName: 'Correlation ID',
						name: 'correlationId',
						type: 'string',
						default: '',
					},
					{
						displayName: 'Destination Dedupes by the Key',
						name: 'destinationIdempotent',
						type: 'options',
						default: '',
						options: [
							{ name: 'Namespace Default', value: '' },
							{ name: 'Yes (e.g. Stripe): 5xx and Timeouts Are Retried', value: 'yes' },
							{ name: 'No: 5xx and Timeouts Go to Review', value: 'no' },
						],
					},
					{
						displayName: 'Idempotency Header',
						name: 'idempotencyHeader',
						type: 'string',
						default: 'Idempotency-Key',
						description:
							'Header that carries the key to the destination, identical on every attempt',
					},
					{
						displayName: 'Owner',
						name: 'owner',
						type: 'string',
						default: '',
						description: 'Who performs it (default: the execution ID)',
					},
					{
						displayName: 'Reconcile Found Statuses',
						name: 'reconcileFound',
						type: 'string',
						default: '200',
						description: 'Comma-separated statuses of the lookup that mean the effect landed',
					},
					{
						displayName: 'Reconcile Not Found Statuses',
						name: 'reconcileNotFound',
						type: 'string',
						default: '404',
						description:
							'Comma-separated statuses of the lookup that mean it did not land (it is then retried)',
					},
					{
						displayName: 'Reconcile URL',
						name: 'reconcileUrl',
						type: 'string',
						default: '',
						placeholder: 'https://api.example.com/orders/by-ref/{key}',
						description:
							'A GET that asks the destination whether an ambiguous attempt (timeout, 5xx) landed; {key} is replaced by the key. Without it such an attempt goes to review.',
					},
					{
						displayName: 'Send Idempotency Header',
						name: 'sendIdempotencyHeader',
						type: 'boolean',
						default: true,
						description:
							'Whether to send the key in the idempotency header (turn off only for destinations that reject unknown headers)',
					},
					{
						displayName: 'Success Statuses',
						name: 'success',
						type: 'string',
						default: '2xx',
						description: '2xx, or a comma-separated list of statuses that mean the effect happened',
					},
					{
						displayName: 'Timeout (Ms)',
						name: 'timeoutMs',
						type: 'number',
						default: 30000,
						typeOptions: { minValue: 1, maxValue: 300000 },
						description: 'Whole attempt: connect, send and response',
					},
					{
						displayName: 'Wait (Ms)',
						name: 'waitMs',
						type: 'number',
						default: 0,
						description:
							'How long a concurrent duplicate waits for the first call to finish and get its response',
					},
				],
			},
			// ---- prepare / complete / fail
			{
				displayName: 'Key',
				name: 'key',
				type: 'string',
				default: '={{ $json.idem ? $json.idem.key : "" }}',
				required: true,
				displayOptions: { show: { operation: ['prepare', 'complete', 'fail'] } },
				description:
					'The key that was claimed: by default idem.key of the incoming item. After other nodes, take idem.key from the item of your claim node, e.g. $("Claim").item.',
			},
			{
				displayName: 'Lease Token',
				name: 'leaseToken',
				type: 'string',
				typeOptions: { password: true },
				default: '={{ $json.idem ? $json.idem.token : "" }}',
				required: true,
				displayOptions: { show: { operation: ['prepare', 'complete', 'fail'] } },
				description:
					'The lease token the claim returned: by default idem.token of the incoming item. After other nodes, take idem.token from the item of your claim node, e.g. $("Claim").item.',
			},
			{
				displayName: 'Payload',
				name: 'preparedPayload',
				type: 'json',
				default: '={{ $json }}',
				displayOptions: { show: { operation: ['prepare'] } },
				description:
					'What will be delivered. A resumed claim returns it as idem.record.prepared_payload.',
			},
			{
				displayName: 'Approval Required',
				name: 'approvalRequired',
				type: 'boolean',
				default: false,
				displayOptions: { show: { operation: ['prepare'] } },
				description:
					'Whether a person must approve before delivery; the next claim answers Busy (awaiting approval) until then',
			},
			{
				displayName: 'Store Result',
				name: 'sendResult',
				type: 'boolean',
				default: true,
				displayOptions: { show: { operation: ['complete'] } },
				description:
					'Whether to store a result that duplicates get back (keep it small; no secrets)',
			},
			{
				displayName: 'Result',
				name: 'result',
				type: 'json',
				default: '={{ $json }}',
				displayOptions: { show: { operation: ['complete'], sendResult: [true] } },
			},
			{
				displayName: 'External Reference',
				name: 'externalRef',
				type: 'string',
				default: '',
				displayOptions: { show: { operation: ['complete'] } },
				description:
					'ID of what was created at the destination (charge ID, contact ID, message ID)',
			},
			{
				displayName: 'HTTP Status',
				name: 'httpStatus',
				type: 'string',
				default: '={{ $json.statusCode !== undefined ? $json.statusCode : "" }}',
				displayOptions: { show: { operation: ['fail'] } },
				description:
					'Status the destination answered. Empty: taken from the error item (n8n error output) when it has one.',
			},
			{
				displayName: 'Kind',
				name: 'kind',
				type: 'options',
				default: 'auto',
				displayOptions: { show: { operation: ['fail'] } },
				options: [
					{ name: 'Let Idem Classify', value: 'auto' },
					{ name: 'Retryable (Nothing Happened)', value: 'retryable' },
					{ name: 'Permanent (Never Retry)', value: 'permanent' },
					{ name: 'Ambiguous (May Have Happened; a Person Decides)', value: 'ambiguous' },
				],
			},
			{
				displayName: 'Error Category',
				name: 'category',
				type: 'options',
				default: 'auto',
				displayOptions: { show: { operation: ['fail'] } },
				options: [
					{ name: 'Auth', value: 'auth' },
					{ name: 'Auto (From the Error Item)', value: 'auto' },
					{ name: 'Business Rule', value: 'business' },
					{ name: 'Connection', value: 'connection' },
					{ name: 'Timeout', value: 'timeout' },
					{ name: 'Validation', value: 'validation' },
				],
			},
			{
				displayName: 'Request Sent',
				name: 'sent',
				type: 'options',
				default: 'unknown',
				displayOptions: { show: { operation: ['fail'] } },
				options: [
					{ name: 'Unknown', value: 'unknown' },
					{ name: 'Yes (May Have Reached the Destination)', value: 'yes' },
					{ name: 'No (e.g. Connection Refused)', value: 'no' },
				],
			},
			{
				displayName: 'Message',
				name: 'message',
				type: 'string',
				default: '',
				displayOptions: { show: { operation: ['fail'] } },
				description:
					'Short, sanitized reason (no message bodies, no credentials). Empty: the message of the error item.',
			},
			{
				displayName: 'Retry After',
				name: 'retryAfter',
				type: 'string',
				default: '',
				displayOptions: { show: { operation: ['fail'] } },
				description: "The destination's Retry-After header (seconds or HTTP date), if any",
			},
			{
				displayName: 'Cost Tokens',
				name: 'costUnits',
				type: 'string',
				default: '',
				displayOptions: { show: { operation: ['complete', 'fail'] } },
				placeholder: 'e.g. {{ $json.usage.total_tokens }}',
				description:
					'Model tokens this attempt spent (a whole number), e.g. of the AI step before this node. Empty: not reported. idem sums them on the record, first attempt and retries apart.',
			},
			{
				displayName: 'Cost USD',
				name: 'costUsd',
				type: 'string',
				default: '',
				displayOptions: { show: { operation: ['complete', 'fail'] } },
				placeholder: 'e.g. 0.0042',
				description: 'US dollars this attempt spent. Empty: not reported.',
			},
			// ---- event: derive key
			{
				displayName: 'Event',
				name: 'deriveEvent',
				type: 'json',
				default: '={{ $json.body !== undefined ? $json.body : $json }}',
				displayOptions: { show: { resource: ['event'], operation: ['deriveKey'] } },
				description: 'The data the key is derived from, e.g. the webhook body',
			},
			{
				displayName: 'Identity Fields',
				name: 'deriveFields',
				type: 'string',
				default: '/id',
				required: true,
				placeholder: '/data/object/payment_intent, /type',
				displayOptions: { show: { resource: ['event'], operation: ['deriveKey'] } },
				description:
					'JSON pointers to the fields that identify the business operation, in order (comma-separated or one per line). Never a delivery ID or a timestamp.',
			},
			{
				displayName: 'Options',
				name: 'deriveOptions',
				type: 'collection',
				placeholder: 'Add option',
				default: {},
				displayOptions: { show: { resource: ['event'], operation: ['deriveKey'] } },
				options: [
					{
						displayName: 'Always Hash',
						name: 'hash',
						type: 'boolean',
						default: false,
						description:
							'Whether to hash the values even when they are short identifiers (they are always hashed when long or when they may hold personal data)',
					},
					{
						displayName: 'Prefix',
						name: 'prefix',
						type: 'string',
						default: '',
						placeholder: 'order',
						description: 'Put before the key, e.g. the kind of event',
					},
					{
						displayName: 'Suffix',
						name: 'suffix',
						type: 'string',
						default: '',
						placeholder: 'crm',
						description: 'Put after the key, e.g. the side effect (one key per side effect)',
					},
				],
			},
		],
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const resource = this.getNodeParameter('resource', 0, 'key') as string;
		const operation = this.getNodeParameter('operation', 0) as string;
		const routed = resource === 'key' && (operation === 'claim' || operation === 'effect');
		// As an AI agent tool only the first output reaches the agent: every answer goes there.
		const single =
			!routed ||
			this.getNode().type.endsWith(TOOL_SUFFIX) ||
			this.getNodeParameter('outputMode', 0, 'routes') === 'single';
		const credentials = await this.getCredentials('idemApi');
		const baseUrl = String(credentials.baseUrl ?? '').trim();
		if (!/^https?:\/\//.test(baseUrl)) {
			throw new NodeOperationError(
				this.getNode(),
				`The Idem API credential's Base URL ${JSON.stringify(baseUrl)} is not an http(s) URL`,
			);
		}

		const outputs: INodeExecutionData[][] = single
			? [[]]
			: operation === 'claim'
				? CLAIM_OUTPUT_NAMES.map(() => [])
				: EFFECT_OUTPUT_NAMES.map(() => []);

		for (let i = 0; i < items.length; i++) {
			try {
				let url: string;
				let body: IDataObject;
				let namespace = '';
				let key = '';
				if (resource === 'event') {
					if (operation !== 'deriveKey') {
						throw new NodeOperationError(
							this.getNode(),
							`Unknown operation ${JSON.stringify(operation)}`,
							{
								itemIndex: i,
							},
						);
					}
					const opts = this.getNodeParameter('deriveOptions', i, {}) as IDataObject;
					url = `${baseUrl.replace(/\/+$/, '')}/v1/keys/derive`;
					body = deriveBody({
						event: this.getNodeParameter('deriveEvent', i),
						fields: this.getNodeParameter('deriveFields', i) as string,
						prefix: opts.prefix as string,
						suffix: opts.suffix as string,
						hash: opts.hash as boolean,
					});
				} else {
					namespace = String(this.getNodeParameter('namespace', i));
					const rawKey = this.getNodeParameter('key', i) as unknown;
					const nsProblem = namespaceProblem(namespace);
					if (nsProblem) {
						throw new NodeOperationError(this.getNode(), `Invalid namespace: ${nsProblem}`, {
							itemIndex: i,
						});
					}
					const kp = keyProblem(rawKey);
					if (kp) {
						throw new NodeOperationError(this.getNode(), `Invalid key: ${kp}`, {
							itemIndex: i,
							description:
								'A missing key is never "skip the gate". Check the Key expression: ' +
								SIDE_EFFECT_KEY_HINT,
						});
					}
					key = String(rawKey);
					const target = { baseUrl, namespace, key };
					if (operation === 'claim') {
						const opts = this.getNodeParameter('claimOptions', i, {}) as IDataObject;
						const fingerprintMode = this.getNodeParameter('fingerprintMode', i) as
							| 'payload'
							| 'fingerprint'
							| 'none';
						body = claimBody({
							fingerprintMode,
							payload:
								fingerprintMode === 'payload' ? this.getNodeParameter('payload', i) : undefined,
							fingerprint:
								fingerprintMode === 'fingerprint'
									? (this.getNodeParameter('fingerprint', i) as string)
									: undefined,
							owner: (opts.owner as string) || this.getExecutionId(),
							leaseMs: opts.leaseMs as number,
							waitMs: opts.waitMs as number,
							correlationId: opts.correlationId as string,
							leaseExpiry: opts.leaseExpiry as string,
						});
					} else if (operation === 'effect') {
						const opts = this.getNodeParameter('effectOptions', i, {}) as IDataObject;
						const bodyMode = this.getNodeParameter('effectBodyMode', i) as EffectParams['bodyMode'];
						const headers = this.getNodeParameter('effectHeaders', i, {}) as IDataObject;
						body = effectBody({
							method: this.getNodeParameter('effectMethod', i) as string,
							url: this.getNodeParameter('effectUrl', i) as string,
							headers: (headers.header as EffectParams['headers']) ?? [],
							bodyMode,
							body: bodyMode === 'json' ? this.getNodeParameter('effectJson', i) : undefined,
							bodyText:
								bodyMode === 'text'
									? (this.getNodeParameter('effectText', i) as string)
									: undefined,
							idempotencyHeader: opts.idempotencyHeader as string,
							sendIdempotencyHeader: opts.sendIdempotencyHeader as boolean | undefined,
							timeoutMs: opts.timeoutMs as number,
							success: opts.success as string,
							destinationIdempotent:
								opts.destinationIdempotent as EffectParams['destinationIdempotent'],
							reconcileUrl: opts.reconcileUrl as string,
							reconcileFound: opts.reconcileFound as string,
							reconcileNotFound: opts.reconcileNotFound as string,
							owner: (opts.owner as string) || this.getExecutionId(),
							correlationId: opts.correlationId as string,
							waitMs: opts.waitMs as number,
						});
					} else {
						const leaseToken = requireToken(this.getNodeParameter('leaseToken', i), operation);
						if (operation === 'prepare') {
							body = prepareBody(
								leaseToken,
								this.getNodeParameter('preparedPayload', i),
								this.getNodeParameter('approvalRequired', i, false) as boolean,
							);
						} else if (operation === 'complete') {
							const sendResult = this.getNodeParameter('sendResult', i, true) as boolean;
							body = completeBody(
								leaseToken,
								sendResult ? this.getNodeParameter('result', i) : undefined,
								this.getNodeParameter('externalRef', i, '') as string,
								costMember(
									this.getNodeParameter('costUnits', i, ''),
									this.getNodeParameter('costUsd', i, ''),
								),
							);
						} else if (operation === 'fail') {
							const json = items[i].json ?? {};
							const error =
								json.error && typeof json.error === 'object'
									? (json.error as IDataObject)
									: undefined;
							const params: FailParams = {
								kind: this.getNodeParameter('kind', i) as FailParams['kind'],
								httpStatus: this.getNodeParameter('httpStatus', i, ''),
								category: this.getNodeParameter('category', i) as string,
								sent: this.getNodeParameter('sent', i) as FailParams['sent'],
								message: this.getNodeParameter('message', i, '') as string,
								retryAfter: this.getNodeParameter('retryAfter', i, '') as string,
								error:
									error ??
									(typeof json.error === 'string' ? { message: json.error as string } : undefined),
								cost: costMember(
									this.getNodeParameter('costUnits', i, ''),
									this.getNodeParameter('costUsd', i, ''),
								),
							};
							body = failBody(leaseToken, params);
						} else {
							throw new NodeOperationError(
								this.getNode(),
								`Unknown operation ${JSON.stringify(operation)}`,
								{
									itemIndex: i,
								},
							);
						}
					}
					url = keyUrl(target, operation);
				}

				const request: IHttpRequestOptions = {
					method: 'POST',
					url,
					body,
					json: true,
					headers: { Accept: 'application/json, application/problem+json' },
					returnFullResponse: true,
					ignoreHttpStatusErrors: true,
					// An effect holds the request open while idem calls the destination.
					timeout:
						REQUEST_SLACK_MS +
						(Number(body.wait_ms) || 0) +
						(operation === 'effect' ? Number(body.timeout_ms) || 30000 : 0),
				};

				let response: { statusCode: number; body: unknown; headers?: IDataObject };
				try {
					// The credential adds `Authorization: Bearer <token>` (none without a token).
					response = (await this.helpers.httpRequestWithAuthentication.call(
						this,
						'idemApi',
						request,
					)) as typeof response;
				} catch (e) {
					// The raw code goes to the description: n8n rewrites messages that contain
					// socket error codes into a generic text that would hide which service failed.
					throw new NodeOperationError(this.getNode(), `Could not reach idem at ${baseUrl}`, {
						itemIndex: i,
						description:
							transportDetail(e) +
							(operation === 'effect'
								? '. Whether idem sent the request is unknown from here: run the node again with the same key (idem replays or resumes it; it never sends twice blindly).'
								: operation === 'complete'
									? '. The side effect already happened: turn on "Retry On Fail" for this node (repeating complete is safe) so the key does not stay in processing.'
									: '. Check the Base URL of the Idem API credential and that idem is running.'),
					});
				}
				const status = response.statusCode;
				const answer = parseBody(response.body) as IDataObject;
				const base = items[i].json ?? {};
				const replayed = String(response.headers?.['idempotent-replayed'] ?? '') === 'true';

				if (routed) {
					const outcome =
						answer && typeof answer === 'object' ? (answer.outcome as string) : undefined;
					const out = outcome
						? operation === 'claim'
							? outputForOutcome(outcome)
							: effectOutputForOutcome(outcome)
						: undefined;
					if (out === undefined) {
						throw new NodeOperationError(this.getNode(), describeProblem(status, answer), {
							itemIndex: i,
							description:
								operation === 'claim'
									? outcome
										? `Unknown claim outcome ${JSON.stringify(outcome)}: the side effect was not run`
										: 'The claim was not answered with an outcome: the side effect was not run'
									: outcome
										? `Unknown effect outcome ${JSON.stringify(outcome)}`
										: 'The effect was not answered with an outcome (nothing was claimed when idem refused the request)',
						});
					}
					const idem: IDataObject = { namespace, key, outcome, status, replayed };
					if (operation === 'effect') idem.response = (answer.response as IDataObject) ?? null;
					idem.record = (answer.record as IDataObject) ?? null;
					if (operation === 'claim') {
						if (answer.token !== undefined) idem.token = answer.token;
						if (answer.resumed !== undefined) idem.resumed = answer.resumed;
					}
					if (answer.retry_after_ms !== undefined) idem.retry_after_ms = answer.retry_after_ms;
					if (operation === 'effect' && answer.reconciled !== undefined)
						idem.reconciled = answer.reconciled;
					if (single) {
						const route = (operation === 'claim' ? CLAIM_ROUTES : EFFECT_ROUTES)[out];
						idem.route = route;
						idem.summary = routeSummary(operation, route);
					}
					outputs[single ? 0 : out].push({ json: { ...base, idem }, pairedItem: { item: i } });
				} else {
					if (status < 200 || status >= 300) {
						throw new NodeOperationError(this.getNode(), describeProblem(status, answer), {
							itemIndex: i,
							description:
								status === 409 && answer?.code === 'lease_lost'
									? operation === 'complete' || (operation === 'fail' && body.sent !== false)
										? 'Another attempt took over this key (its lease had expired) and idem already holds its outcome. If this run did the side effect, it may now have happened twice: idem recorded a fenced completion on the key and alerted. Check the destination, and give this step more lease (Lease (ms), or a heartbeat) than it takes. Do not repeat the side effect from here.'
										: 'Another attempt took over this key (its lease had expired). Do not repeat the side effect from here.'
									: undefined,
						});
					}
					const idem: IDataObject =
						resource === 'event'
							? { status, ...(answer as IDataObject) }
							: { namespace, key, status, ...(answer as IDataObject) };
					outputs[0].push({ json: { ...base, idem }, pairedItem: { item: i } });
				}
			} catch (error) {
				if (this.continueOnFail()) {
					// Never onto Proceed: an unanswered claim must not run the side effect. An
					// unanswered effect goes to Retry Later: calling again with the same key is
					// always safe (idem replays, resumes or refuses; it never resends blindly).
					const e = error as Error & { description?: string };
					const json: IDataObject = {
						error: e.description ? `${e.message}: ${e.description}` : e.message,
					};
					let out = 0;
					if (routed) {
						const route = operation === 'claim' ? 'busy' : 'retry_later';
						if (single) {
							json.idem = {
								route,
								summary:
									'idem could not be asked or refused the request: nothing was done. Do not do the side effect now.',
							};
						} else {
							out = operation === 'claim' ? OUTPUT.busy : EFFECT_OUTPUT.retryLater;
						}
					}
					outputs[out].push({ json, pairedItem: { item: i } });
					continue;
				}
				// A NodeOperationError is passed through unchanged (with its item index).
				throw new NodeOperationError(this.getNode(), error as Error, { itemIndex: i });
			}
		}
		return outputs;
	}
}
