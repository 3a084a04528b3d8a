import type {
	ICredentialDataDecryptedObject,
	ICredentialTestRequest,
	ICredentialType,
	IHttpRequestOptions,
	INodeProperties,
} from 'n8n-workflow';

/**
 * Where idem listens and the token n8n sends to it.
 *
 * A worker token is enough for every operation of the Idempotency Gate node, also one scoped to
 * a single namespace (`idem token create --role worker --namespace NS`). A server started
 * without any token listens on loopback only; leave Token empty for it and no Authorization
 * header is sent at all.
 */
export class IdemApi implements ICredentialType {
	name = 'idemApi';

	displayName = 'Idem API';

	icon = { light: 'file:idem.svg', dark: 'file:idem.dark.svg' } as const;

	documentationUrl =
		'https://github.com/idem-ledger/idem/blob/main/integrations/n8n/node/README.md#credentials';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://127.0.0.1:7780',
			placeholder: 'https://idem.internal.example:7780',
			description: 'Base URL of the idem server, without /v1',
			required: true,
		},
		{
			displayName: 'Token',
			name: 'token',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				'Worker token printed by `idem token create --role worker --namespace NS`. Leave empty only for a server without tokens (loopback).',
		},
		{
			displayName: 'Forward Secret',
			name: 'forwardSecret',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				"Only for the Idem Intake Trigger: the source's forward.secret (whsec_…). Several, separated by spaces, while rotating.",
		},
	];

	/** `Authorization: Bearer <token>`; no header at all when Token is empty. */
	async authenticate(
		credentials: ICredentialDataDecryptedObject,
		requestOptions: IHttpRequestOptions,
	): Promise<IHttpRequestOptions> {
		const token = String(credentials.token ?? '').trim();
		if (token === '') return requestOptions;
		return {
			...requestOptions,
			headers: { ...(requestOptions.headers ?? {}), Authorization: `Bearer ${token}` },
		};
	}

	/** Any valid token may ask who it is, whatever its role or namespace. */
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/v1/whoami',
			method: 'GET',
		},
	};
}
