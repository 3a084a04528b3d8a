// A stubbed IExecuteFunctions: parameters per item, a recorded HTTP helper with canned answers.
const { IdempotencyGate } = require('../dist/nodes/IdempotencyGate/IdempotencyGate.node.js');

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
	const ctx = {
		getInputData: () => o.items.map((json) => ({ json })),
		getNodeParameter: (name, i, fallback) => {
			const v = params(name, i);
			return v === undefined ? fallback : v;
		},
		getCredentials: async (name) => {
			if (name !== 'idemApi') throw new Error(`unexpected credential ${name}`);
			return o.credentials ?? { baseUrl: 'http://127.0.0.1:7780/', token: 'tok_secret' };
		},
		getExecutionId: () => '42',
		getNode: () => ({ name: 'Claim', type: 'n8n-nodes-idem.idempotencyGate', typeVersion: 1, parameters: {} }),
		continueOnFail: () => Boolean(o.continueOnFail),
		helpers: {
			httpRequest: async (req) => {
				requests.push(req);
				return o.respond(req, requests.length - 1);
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
