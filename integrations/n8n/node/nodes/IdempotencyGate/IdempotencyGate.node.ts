import {
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
	EFFECT_OUTPUT,
	EFFECT_OUTPUT_NAMES,
	OUTPUT,
	claimBody,
	completeBody,
	costMember,
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
	type EffectParams,
	type FailParams,
} from './gate';

/**
 * Outputs depend on the operation: Claim shows one output per kind of answer so the canvas
 * shows every path; the worker writes have one. Evaluated by n8n from its source text, so it
 * must not reference anything outside itself.
 */
const configuredOutputs = (parameters: INodeParameters) => {
	if ((parameters.operation ?? 'claim') === 'claim') {
		return ['Proceed', 'Duplicate', 'Busy', 'Needs Review', 'Blocked'].map((displayName) => ({
			type: 'main',
			displayName,
		}));
	}
	if (parameters.operation === 'effect') {
		return ['Performed', 'Duplicate', 'Failed', 'Retry Later', 'Needs Review', 'Blocked'].map((displayName) => ({
			type: 'main',
			displayName,
		}));
	}
	return [{ type: 'main' }];
};

const SIDE_EFFECT_KEY_HINT =
	'Identify the business operation, never the attempt: the provider event id plus the side effect, e.g. {{ $json.body.id }}:crm. Never $execution.id.';

export class IdempotencyGate implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Idempotency Gate',
		name: 'idempotencyGate',
		icon: 'file:idem.svg',
		group: ['transform'],
		version: 1,
		subtitle: '={{ $parameter["operation"] }}',
		description:
			'Ask idem before an irreversible side effect (claim) and tell it what happened (complete / fail)',
		defaults: {
			name: 'Idempotency Gate',
		},
		inputs: ['main'],
		outputs: `={{(${configuredOutputs})($parameter)}}`,
		credentials: [
			{
				name: 'idemApi',
				required: true,
			},
		],
		properties: [
			{
				displayName: 'Operation',
				name: 'operation',
				type: 'options',
				noDataExpression: true,
				options: [
					{
						name: 'Claim',
						value: 'claim',
						description: 'Ask whether the side effect may run now; routes to Proceed, Duplicate, Busy, Needs Review or Blocked',
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
						description: 'Record that the side effect failed; idem classifies it and says whether a retry is allowed',
						action: 'Fail a claimed key',
					},
					{
						name: 'Prepare',
						value: 'prepare',
						description: 'Save the payload to deliver (e.g. an AI draft) so every later attempt reuses it',
						action: 'Prepare the payload of a claimed key',
					},
				],
				default: 'claim',
			},
			{
				displayName: 'Namespace',
				name: 'namespace',
				type: 'string',
				default: 'n8n',
				required: true,
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
				displayOptions: { show: { operation: ['claim', 'effect'] } },
				description: SIDE_EFFECT_KEY_HINT,
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
						description: 'Idem fingerprints the payload; the same key with a different payload is a conflict (Blocked)',
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
						description: 'How long the claim is held before another attempt may take over. 0 = namespace default (30 s).',
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
						description: 'Instead of an immediate Busy, wait up to this long for the holder to finish (max 30000)',
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
						description: 'Header that carries the key to the destination, identical on every attempt',
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
						description: 'Comma-separated statuses of the lookup that mean it did not land (it is then retried)',
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
						description: 'Whether to send the key in the idempotency header (turn off only for destinations that reject unknown headers)',
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
						description: 'How long a concurrent duplicate waits for the first call to finish and get its response',
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
				description: 'What will be delivered. A resumed claim returns it as idem.record.prepared_payload.',
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
				description: 'Whether to store a result that duplicates get back (keep it small; no secrets)',
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
				description: 'ID of what was created at the destination (charge ID, contact ID, message ID)',
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
		],
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const operation = this.getNodeParameter('operation', 0) as string;
		const credentials = await this.getCredentials('idemApi');
		const baseUrl = String(credentials.baseUrl ?? '').trim();
		if (!/^https?:\/\//.test(baseUrl)) {
			throw new NodeOperationError(
				this.getNode(),
				`The Idem API credential's Base URL ${JSON.stringify(baseUrl)} is not an http(s) URL`,
			);
		}
		const token = String(credentials.token ?? '').trim();

		const outputs: INodeExecutionData[][] =
			operation === 'claim'
				? CLAIM_OUTPUT_NAMES.map(() => [])
				: operation === 'effect'
					? EFFECT_OUTPUT_NAMES.map(() => [])
					: [[]];

		for (let i = 0; i < items.length; i++) {
			try {
				const namespace = String(this.getNodeParameter('namespace', i));
				const rawKey = this.getNodeParameter('key', i) as unknown;
				const nsProblem = namespaceProblem(namespace);
				if (nsProblem) throw new NodeOperationError(this.getNode(), `Invalid namespace: ${nsProblem}`, { itemIndex: i });
				const kp = keyProblem(rawKey);
				if (kp) {
					throw new NodeOperationError(this.getNode(), `Invalid key: ${kp}`, {
						itemIndex: i,
						description:
							'A missing key is never "skip the gate". Check the Key expression: ' + SIDE_EFFECT_KEY_HINT,
					});
				}
				const key = String(rawKey);
				const target = { baseUrl, namespace, key };

				let verb: string;
				let body: IDataObject;
				if (operation === 'claim') {
					const opts = this.getNodeParameter('claimOptions', i, {}) as IDataObject;
					const fingerprintMode = this.getNodeParameter('fingerprintMode', i) as
						| 'payload'
						| 'fingerprint'
						| 'none';
					verb = 'claim';
					body = claimBody({
						fingerprintMode,
						payload: fingerprintMode === 'payload' ? this.getNodeParameter('payload', i) : undefined,
						fingerprint:
							fingerprintMode === 'fingerprint' ? (this.getNodeParameter('fingerprint', i) as string) : undefined,
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
					verb = 'effect';
					body = effectBody({
						method: this.getNodeParameter('effectMethod', i) as string,
						url: this.getNodeParameter('effectUrl', i) as string,
						headers: (headers.header as EffectParams['headers']) ?? [],
						bodyMode,
						body: bodyMode === 'json' ? this.getNodeParameter('effectJson', i) : undefined,
						bodyText: bodyMode === 'text' ? (this.getNodeParameter('effectText', i) as string) : undefined,
						idempotencyHeader: opts.idempotencyHeader as string,
						sendIdempotencyHeader: opts.sendIdempotencyHeader as boolean | undefined,
						timeoutMs: opts.timeoutMs as number,
						success: opts.success as string,
						destinationIdempotent: opts.destinationIdempotent as EffectParams['destinationIdempotent'],
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
						verb = 'prepare';
						body = prepareBody(
							leaseToken,
							this.getNodeParameter('preparedPayload', i),
							this.getNodeParameter('approvalRequired', i, false) as boolean,
						);
					} else if (operation === 'complete') {
						verb = 'complete';
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
						verb = 'fail';
						const json = items[i].json ?? {};
						const error =
							json.error && typeof json.error === 'object' ? (json.error as IDataObject) : undefined;
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
						throw new NodeOperationError(this.getNode(), `Unknown operation ${JSON.stringify(operation)}`);
					}
				}

				const request: IHttpRequestOptions = {
					method: 'POST',
					url: keyUrl(target, verb),
					body,
					json: true,
					headers: {
						Accept: 'application/json, application/problem+json',
						...(token ? { Authorization: `Bearer ${token}` } : {}),
					},
					returnFullResponse: true,
					ignoreHttpStatusErrors: true,
					// An effect holds the request open while idem calls the destination.
					timeout:
						10000 +
						(Number(body.wait_ms) || 0) +
						(operation === 'effect' ? Number(body.timeout_ms) || 30000 : 0),
				};

				let response: { statusCode: number; body: unknown; headers?: IDataObject };
				try {
					response = (await this.helpers.httpRequest(request)) as typeof response;
				} catch (e) {
					const cause = (e as { code?: string; message?: string }) ?? {};
					// The raw code goes to the description: n8n rewrites messages that contain
					// socket error codes into a generic text that would hide which service failed.
					throw new NodeOperationError(this.getNode(), `Could not reach idem at ${baseUrl}`, {
						itemIndex: i,
						description:
							`${cause.code ?? ''} ${cause.message ?? ''}`.trim() +
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

				if (operation === 'claim') {
					const outcome = answer && typeof answer === 'object' ? (answer.outcome as string) : undefined;
					const out = outcome ? outputForOutcome(outcome) : undefined;
					if (out === undefined) {
						throw new NodeOperationError(this.getNode(), describeProblem(status, answer), {
							itemIndex: i,
							description: outcome
								? `Unknown claim outcome ${JSON.stringify(outcome)}: the side effect was not run`
								: 'The claim was not answered with an outcome: the side effect was not run',
						});
					}
					const idem: IDataObject = {
						namespace,
						key,
						outcome,
						status,
						replayed: String(response.headers?.['idempotent-replayed'] ?? '') === 'true',
						record: (answer.record as IDataObject) ?? null,
					};
					if (answer.token !== undefined) idem.token = answer.token;
					if (answer.resumed !== undefined) idem.resumed = answer.resumed;
					if (answer.retry_after_ms !== undefined) idem.retry_after_ms = answer.retry_after_ms;
					outputs[out].push({ json: { ...base, idem }, pairedItem: { item: i } });
				} else if (operation === 'effect') {
					const outcome = answer && typeof answer === 'object' ? (answer.outcome as string) : undefined;
					const out = outcome ? effectOutputForOutcome(outcome) : undefined;
					if (out === undefined) {
						throw new NodeOperationError(this.getNode(), describeProblem(status, answer), {
							itemIndex: i,
							description: outcome
								? `Unknown effect outcome ${JSON.stringify(outcome)}`
								: 'The effect was not answered with an outcome (nothing was claimed when idem refused the request)',
						});
					}
					const idem: IDataObject = {
						namespace,
						key,
						outcome,
						status,
						replayed: String(response.headers?.['idempotent-replayed'] ?? '') === 'true',
						response: (answer.response as IDataObject) ?? null,
						record: (answer.record as IDataObject) ?? null,
					};
					if (answer.retry_after_ms !== undefined) idem.retry_after_ms = answer.retry_after_ms;
					if (answer.reconciled !== undefined) idem.reconciled = answer.reconciled;
					outputs[out].push({ json: { ...base, idem }, pairedItem: { item: i } });
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
					const idem: IDataObject = { namespace, key, status, ...(answer as IDataObject) };
					outputs[0].push({ json: { ...base, idem }, pairedItem: { item: i } });
				}
			} catch (error) {
				if (this.continueOnFail()) {
					// Never onto Proceed: an unanswered claim must not run the side effect. An
					// unanswered effect goes to Retry Later: calling again with the same key is
					// always safe (idem replays, resumes or refuses; it never resends blindly).
					const out =
						operation === 'claim' ? OUTPUT.busy : operation === 'effect' ? EFFECT_OUTPUT.retryLater : 0;
					const e = error as Error & { description?: string };
					outputs[out].push({
						json: { error: e.description ? `${e.message}: ${e.description}` : e.message },
						pairedItem: { item: i },
					});
					continue;
				}
				if (error instanceof NodeOperationError) throw error;
				throw new NodeOperationError(this.getNode(), error as Error, { itemIndex: i });
			}
		}
		return outputs;
	}
}
