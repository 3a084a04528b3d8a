import type {
	IAuthenticateGeneric,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

/**
 * Where idem listens and the token that lets this n8n instance claim keys.
 *
 * A worker-role token is enough for the Idempotency Gate node (claim, prepare, complete, fail).
 * A server started without any token only listens on loopback; leave Token empty for it.
 */
export class IdemApi implements ICredentialType {
	name = 'idemApi';

	displayName = 'Idem API';

	icon = 'file:idem.svg' as const;

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
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '={{$credentials.token ? "Bearer " + $credentials.token : ""}}',
			},
		},
	};

	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/v1/namespaces/n8n',
			method: 'GET',
		},
	};
}
