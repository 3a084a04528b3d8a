// Checks of the comparison harness that need no n8n: the workflows are wired (every node
// runs from the Webhook, the crash point sits where docs/comparison.md says), and the CI
// check fails on anything but one side effect per idem row.
//   node --test integrations/n8n/compare/
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { summarize, check } = require('./summarize.js');

function generate() {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idem-compare-wf-'));
	const means = execFileSync(process.execPath, [path.join(__dirname, 'workflows.js'), dir], {
		encoding: 'utf8',
	})
		.trim()
		.split(' ');
	const wfs = Object.fromEntries(
		means.map((m) => [m, JSON.parse(fs.readFileSync(path.join(dir, `${m}.json`), 'utf8'))]),
	);
	fs.rmSync(dir, { recursive: true, force: true });
	return wfs;
}

// The node names in the order a single path from the Webhook reaches them (output 0 first).
function reachable(wf) {
	const seen = [];
	const walk = (name) => {
		if (seen.includes(name)) return;
		seen.push(name);
		for (const out of wf.connections[name]?.main ?? []) for (const c of out) walk(c.node);
	};
	walk('Webhook');
	return seen;
}

test('one workflow per means, each with its own webhook path', () => {
	const wfs = generate();
	assert.deepEqual(Object.keys(wfs), [
		'removedup',
		'datatable',
		'staticdata',
		'redis',
		'postgres',
		'gate',
		'effect',
		'intake',
	]);
	const paths = Object.values(wfs).map(
		(wf) => wf.nodes.find((n) => n.name === 'Webhook').parameters.path,
	);
	assert.equal(new Set(paths).size, paths.length);
	assert.deepEqual(new Set(Object.values(wfs).map((wf) => wf.id)).size, paths.length);
});

test('every node of every workflow runs from the Webhook', () => {
	for (const [means, wf] of Object.entries(generate())) {
		const names = wf.nodes.map((n) => n.name).sort();
		assert.deepEqual(reachable(wf).sort(), names, `${means}: a node is not wired`);
	}
});

test('the crash point sits between the bookkeeping and the effect', () => {
	const wfs = generate();
	for (const means of ['removedup', 'datatable', 'staticdata', 'redis', 'postgres']) {
		const order = reachable(wfs[means]);
		assert.ok(
			order.indexOf('Crash point') < order.indexOf('Side effect'),
			`${means}: mark, crash, effect`,
		);
		assert.equal(order.at(-1), 'Side effect', `${means}: the effect is last`);
	}
	for (const means of ['gate', 'intake']) {
		const order = reachable(wfs[means]);
		assert.ok(
			order.indexOf('Side effect') < order.indexOf('Crash point'),
			`${means}: effect, crash`,
		);
		assert.ok(
			order.indexOf('Crash point') < order.indexOf('Complete'),
			`${means}: crash, complete`,
		);
		assert.equal(
			wfs[means].connections['Side effect'].main[1][0].node,
			'Fail',
			`${means}: errors go to Fail`,
		);
	}
	assert.deepEqual(reachable(wfs.effect), ['Webhook', 'Effect', 'Crash point']);
});

test('every means does the same effect under its own key', () => {
	for (const [means, wf] of Object.entries(generate())) {
		if (means === 'effect') continue;
		const fx = wf.nodes.find((n) => n.name === 'Side effect');
		const key = fx.parameters.headerParameters.parameters.find((p) => p.name === 'Idempotency-Key');
		assert.match(key.value, new RegExp(`^=${means}:\\{\\{`));
		assert.equal(fx.parameters.options.timeout, 2000);
	}
});

function lines(rows) {
	return rows.map(([means, burst, replay, crash]) => ({ means, burst, replay, crash }));
}

test('the check passes when every idem row made one effect in every phase', () => {
	const doc = summarize(
		lines([
			['staticdata', 5, 5, 0],
			['gate', 1, 1, 1],
			['effect', 1, 1, 1],
			['intake', 1, 1, 1],
			['gate', 1, 1, 1],
		]),
		{},
	);
	assert.deepEqual(check(doc), []);
	assert.deepEqual(doc.means.staticdata.burst, { 5: 1 });
	assert.deepEqual(doc.means.gate.crash, { 1: 2 });
});

test('the check fails on a double, a loss or a missing idem row', () => {
	const twice = summarize(
		lines([
			['gate', 1, 2, 1],
			['effect', 1, 1, 1],
			['intake', 1, 1, 1],
		]),
		{},
	);
	assert.match(check(twice).join('\n'), /gate replay/);
	const lost = summarize(
		lines([
			['gate', 1, 1, 1],
			['effect', 1, 1, 0],
			['intake', 1, 1, 1],
		]),
		{},
	);
	assert.match(check(lost).join('\n'), /effect crash/);
	const missing = summarize(
		lines([
			['gate', 1, 1, 1],
			['effect', 1, 1, 1],
		]),
		{},
	);
	assert.match(check(missing).join('\n'), /intake: no repetitions/);
});
