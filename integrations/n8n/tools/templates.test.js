// Static checks of the generated workflow JSON: up to date, wired, no secrets, keys encoded.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { OUTPUTS } = require('./generate-templates');

test('committed templates are what the generator produces', () => {
	execFileSync(process.execPath, [path.join(__dirname, 'generate-templates.js'), '--check'], { stdio: 'pipe' });
});

for (const [file] of OUTPUTS) {
	const name = path.relative(path.join(__dirname, '..'), file);
	const wf = JSON.parse(fs.readFileSync(file, 'utf8'));
	const text = JSON.stringify(wf);

	test(`${name}: n8n workflow shape with a fixed id`, () => {
		assert.match(wf.id, /^[A-Za-z0-9]{16}$/);
		assert.ok(wf.name && Array.isArray(wf.nodes) && wf.connections);
		assert.equal(wf.active, false);
		const names = new Set(wf.nodes.map((n) => n.name));
		assert.equal(names.size, wf.nodes.length, 'node names are unique');
		for (const n of wf.nodes) {
			assert.ok(n.id && n.type && n.typeVersion && Array.isArray(n.position), n.name);
		}
		for (const [from, c] of Object.entries(wf.connections)) {
			assert.ok(names.has(from), `connection from unknown node ${from}`);
			for (const out of c.main) for (const l of out) assert.ok(names.has(l.node), `${from} → unknown ${l.node}`);
		}
	});

	test(`${name}: stock nodes only (the community-node example aside)`, () => {
		for (const n of wf.nodes) {
			if (name.startsWith('templates/')) assert.match(n.type, /^n8n-nodes-base\./, n.name);
			else assert.match(n.type, /^(n8n-nodes-base|n8n-nodes-idem)\./, n.name);
		}
	});

	test(`${name}: every idem call encodes the key, reads JSON, and uses a credential placeholder`, () => {
		const idemCalls = wf.nodes.filter(
			(n) => n.type === 'n8n-nodes-base.httpRequest' && /\/v1\/namespaces\//.test(n.parameters.url),
		);
		for (const n of idemCalls) {
			assert.match(n.parameters.url, /keys\/\{\{ encodeURIComponent\(/, n.name);
			assert.match(n.parameters.url, /namespaces\/\{\{ encodeURIComponent\(/, n.name);
			assert.equal(n.parameters.options.response.response.responseFormat, 'json', n.name);
			assert.equal(n.parameters.authentication, 'genericCredentialType', n.name);
			assert.ok(n.credentials && n.credentials.httpHeaderAuth, n.name);
			if (/\/(claim|effect)$/.test(n.parameters.url)) {
				assert.notEqual(n.retryOnFail, true, `${n.name}: never Retry On Fail on claim or effect`);
				assert.equal(n.parameters.options.response.response.neverError, true, n.name);
				assert.equal(n.parameters.options.response.response.fullResponse, true, n.name);
				assert.equal(n.onError, 'continueErrorOutput', n.name);
			}
			if (/\/complete$/.test(n.parameters.url)) assert.equal(n.retryOnFail, true, `${n.name}: complete retries`);
		}
		// Claim + complete/fail at least, or one effect (idem makes the call and records it).
		const effects = idemCalls.filter((n) => /\/effect$/.test(n.parameters.url));
		if (name.startsWith('templates/')) assert.ok(idemCalls.length >= 2 || effects.length >= 1);
		for (const n of effects) {
			assert.ok(n.parameters.options.timeout > 30000, `${n.name}: the call to idem outlasts the effect's own timeout`);
			assert.doesNotMatch(n.parameters.jsonBody, /idempotency_header: null/, `${n.name}: the key reaches the destination`);
		}
	});

	test(`${name}: no secrets, no execution id in keys, no hard-coded idem address outside the settings default`, () => {
		assert.doesNotMatch(text, /Bearer [A-Za-z0-9]/);
		for (const n of wf.nodes) {
			if (n.type === 'n8n-nodes-base.httpRequest' && /\/v1\/namespaces\//.test(n.parameters.url)) {
				assert.doesNotMatch(n.parameters.url, /127\.0\.0\.1|localhost/, n.name);
				assert.doesNotMatch(n.parameters.url, /\$execution\.id/, `${n.name}: the execution id is never a key`);
			}
		}
	});
}
