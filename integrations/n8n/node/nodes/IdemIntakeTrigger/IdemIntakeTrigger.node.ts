import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IHookFunctions,
	type INodeType,
	type INodeTypeDescription,
	type IWebhookFunctions,
	type IWebhookResponseData,
} from 'n8n-workflow';

import { DEFAULT_TOLERANCE_SECONDS, parseForwardBody, verifyForward } from './forward';

/**
 * Receives the events idem's webhook intake forwards. A forward is verified (Standard
 * Webhooks signature with the credential's Forward Secret) before anything else: a request
 * that fails gets 401 and never starts an execution. A verified one starts the workflow with
 * the event (body, key, event id, attempt, source).
 *
 * The answer to idem: by default when the workflow has finished (a 2xx then means an execution
 * ran to its end; an error makes idem retry, which the per-effect gate makes harmless), or from
 * a Respond to Webhook node. Never "immediately": an n8n that is starting has been seen to
 * answer such a webhook 200 and run nothing, and idem would count the event delivered.
 */
export class IdemIntakeTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Idem Intake Trigger',
		name: 'idemIntakeTrigger',
		icon: { light: 'file:idem.svg', dark: 'file:idem.dark.svg' },
		group: ['trigger'],
		version: 1,
		subtitle: '={{ "idem forwards to /" + $parameter["path"] }}',
		description:
			'Starts the workflow on each event idem forwards from its webhook intake, after checking idem signed it',
		defaults: {
			name: 'Idem Intake Trigger',
		},
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		credentials: [
			{
				name: 'idemApi',
				required: true,
			},
		],
		webhooks: [
			{
				name: 'default',
				httpMethod: 'POST',
				responseMode: '={{$parameter["respond"]}}',
				// An empty 2xx whichever branch ended the run (a Duplicate or Busy claim output too): a
				// 500 for "no item to return" would make idem retry an event that was handled.
				responseData: 'noData',
				path: '={{$parameter["path"]}}',
				// The path as given (n8n would otherwise put the webhook id in front of it).
				isFullPath: true,
			},
		],
		properties: [
			{
				displayName: 'Path',
				name: 'path',
				type: 'string',
				default: 'idem-intake',
				required: true,
				description:
					"The webhook path. Set the source's forward URL in idem to this workflow's production URL (n8n's base URL + /webhook/ + this path).",
			},
			{
				displayName: 'Respond',
				name: 'respond',
				type: 'options',
				default: 'lastNode',
				options: [
					{
						name: 'When Last Node Finishes',
						value: 'lastNode',
						description: 'Idem hears 2xx only once the workflow ran to its end',
					},
					{
						name: "Using 'Respond to Webhook' Node",
						value: 'responseNode',
						description:
							'Answer idem early from a Respond to Webhook node (after the checks you need)',
					},
				],
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add option',
				default: {},
				options: [
					{
						displayName: 'Check Source on Activation',
						name: 'source',
						type: 'string',
						default: '',
						placeholder: 'stripe',
						description:
							"Name of the idem source that forwards here. When set, activating the workflow checks that idem forwards this source to this workflow's production URL (the credential's token must be allowed to read sources: operator or admin).",
					},
					{
						displayName: 'Tolerance (Seconds)',
						name: 'toleranceSeconds',
						type: 'number',
						typeOptions: { minValue: 1 },
						default: DEFAULT_TOLERANCE_SECONDS,
						description:
							'How far the signed timestamp may be from this clock; an older forward (a captured one sent again) is refused',
					},
				],
			},
		],
	};

	/**
	 * idem's source holds the registration (its forward.url); the operator sets it with `idem
	 * source put`. On activation the node checks it when Check Source on Activation names the
	 * source, and refuses to activate a workflow that idem does not forward to; nothing is
	 * removed on deactivation (idem keeps the events and retries them).
	 */
	webhookMethods = {
		default: {
			async checkExists(this: IHookFunctions): Promise<boolean> {
				const options = this.getNodeParameter('options', {}) as IDataObject;
				const source = String(options.source ?? '').trim();
				if (source === '') return true;
				const credentials = await this.getCredentials('idemApi');
				const base = String(credentials.baseUrl ?? '').replace(/\/+$/, '');
				const answer = (await this.helpers.httpRequestWithAuthentication.call(this, 'idemApi', {
					method: 'GET',
					url: `${base}/v1/sources/${encodeURIComponent(source)}`,
					json: true,
				})) as IDataObject;
				const here = this.getNodeWebhookUrl('default');
				const urls = [answer.forward, ...Object.values((answer.forwards as IDataObject) ?? {})]
					.filter((f): f is IDataObject => typeof f === 'object' && f !== null)
					.map((f) => f.url);
				return urls.includes(here);
			},
			async create(this: IHookFunctions): Promise<boolean> {
				const options = this.getNodeParameter('options', {}) as IDataObject;
				throw new NodeOperationError(
					this.getNode(),
					`idem source "${String(options.source)}" does not forward to ${String(this.getNodeWebhookUrl('default'))}`,
					{
						description:
							'Point the source at this URL (idem source put NAME, forward URL), or clear Check Source on Activation',
					},
				);
			},
			async delete(this: IHookFunctions): Promise<boolean> {
				return true;
			},
		},
	};

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		const req = this.getRequestObject();
		if (!req.rawBody) await req.readRawBody();
		const raw: Buffer = req.rawBody ?? Buffer.alloc(0);
		const credentials = await this.getCredentials('idemApi');
		const secrets = String(credentials.forwardSecret ?? '')
			.split(/[\s,]+/)
			.filter((s) => s !== '');
		const options = this.getNodeParameter('options', {}) as IDataObject;
		const tolerance = Number(options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS);
		const verdict = verifyForward(
			req.headers,
			raw,
			secrets,
			Math.floor(Date.now() / 1000),
			tolerance,
		);
		if (!verdict.ok) {
			// Answered here, with no workflow data: n8n starts no execution for it.
			this.getResponseObject()
				.status(401)
				.json({
					code: 'invalid_signature',
					message: `not a forward idem signed: ${verdict.reason}`,
				});
			return { noWebhookResponse: true };
		}
		const { event } = verdict;
		const contentType = req.headers['content-type'];
		return {
			workflowData: [
				[
					{
						json: {
							body: parseForwardBody(raw, contentType) as IDataObject,
							key: event.key,
							eventId: event.eventId,
							attempt: event.attempt,
							source: event.source,
							receivedAt: event.receivedAt,
						},
					},
				],
			],
		};
	}
}
