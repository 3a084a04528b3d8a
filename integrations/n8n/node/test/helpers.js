// A stubbed IExecuteFunctions: parameters per item, a recorded HTTP helper with canned answers.
// Authenticated requests go through the credential's real `authenticate`, as n8n does.
const { IdempotencyGate } = require('../dist/nodes/IdempotencyGate/IdempotencyGate.node.js');
const { IdemApi } = require('../dist/credentials/IdemApi.credentials.js');

/**
 * @param {object} o
 * @param {object[]} o.items            input item json
 * @param {object|function} o.params    parameters (or (name, i) => value)
 * @param {function} o.respond          (request, callIndex) => {statusCode, body, headers} | throws
 * @param {object} [o.credentials]
 * @param {boolean} [o.continueOnFail]
 */
function makeContext(o) {
	const requests = [];
	const params = typeof o.params === 'function' ? o.params : (name, i) => {
		const v = o.params[name];
		return typeof v === 'function' ? v(i) : v;
	};
	const credentials = o.credentials ?? { baseUrl: 'http://127.0.0.1:7780/', token: 'tok_secret' };
	const ctx = {
		getInputData: () => o.items.map((json) => ({ json })),
		getNodeParameter: (name, i, fallback) => {
			const v = params(name, i);
			return v === undefined ? fallback : v;
		},
		getCredentials: async (name) => {
			if (name !== 'idemApi') throw new Error(`unexpected credential ${name}`);
			return credentials;
		},
		getExecutionId: () => '42',
		getNode: () => ({
			name: 'Claim',
			type: o.nodeType ?? 'n8n-nodes-idem.idempotencyGate',
			typeVersion: 1,
			parameters: {},
		}),
		continueOnFail: () => Boolean(o.continueOnFail),
		helpers: {
			httpRequest: async () => {
				throw new Error('unauthenticated httpRequest: every call to idem must go through the credential');
			},
			httpRequestWithAuthentication: async function (credentialType, req) {
				if (credentialType !== 'idemApi') throw new Error(`unexpected credential ${credentialType}`);
				if (this !== ctx) throw new Error('httpRequestWithAuthentication must be called with the node context');
				const authed = await new IdemApi().authenticate(credentials, req);
				requests.push(authed);
				return o.respond(authed, requests.length - 1);
			},
		},
	};
	return { ctx, requests };
}

async function run(o) {
	const { ctx, requests } = makeContext(o);
	const node = new IdempotencyGate();
	const out = await node.execute.call(ctx);
	return { out, requests };
}

module.exports = { makeContext, run, IdempotencyGate };
