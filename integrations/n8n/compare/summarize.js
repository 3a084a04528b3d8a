#!/usr/bin/env node
// Turns the comparison's per-repetition lines into its published JSON, and checks it.
//   node summarize.js RESULTS.jsonl OUT.json NAME=VALUE…   (the versions and the run's settings)
//   node summarize.js --check OUT.json                     (exit 1 unless idem's rows are 1s)
//   node summarize.js --table OUT.json                     (the Markdown table of docs/comparison.md)
// Per means and phase the distribution is {"<side effects>": <repetitions>}: 20 repetitions
// of 5 concurrent deliveries that all made one effect read {"1": 20}.
'use strict';
const fs = require('node:fs');

// The rows that must make exactly one side effect in every phase.
const IDEM_ROWS = ['gate', 'effect', 'intake'];
const PHASES = ['burst', 'replay', 'crash'];
const LABELS = {
	removedup: 'Remove Duplicates node (across executions)',
	datatable: 'Data table: If Row Does Not Exist → Insert',
	staticdata: 'workflow static data ($getWorkflowStaticData)',
	redis: 'Redis node (INCR; the first writer acts)',
	postgres: 'Postgres node: INSERT … ON CONFLICT DO NOTHING RETURNING',
	gate: 'idem gate node (claim → effect → complete)',
	effect: 'idem effect (idem makes the call)',
	intake: 'idem intake in front (→ gate node)',
};

function distribution(values) {
	const d = {};
	for (const v of values) d[v] = (d[v] || 0) + 1;
	return d;
}

function summarize(lines, meta) {
	const means = {};
	for (const r of lines) {
		const m = (means[r.means] ??= {
			label: LABELS[r.means] ?? r.means,
			reps: [],
			timeout_probe: null,
		});
		if (r.timeout_probe) m.timeout_probe = r.timeout_probe;
		else {
			m.reps.push({ burst: r.burst, replay: r.replay, crash: r.crash });
			if (r.crash_left) (m.crash_left ??= {})[r.crash_left] = (m.crash_left[r.crash_left] || 0) + 1;
		}
	}
	for (const m of Object.values(means)) {
		for (const p of PHASES) m[p] = distribution(m.reps.map((r) => r[p]));
	}
	return { what: 'side effects at the sink per event, by means and phase', ...meta, means };
}

function check(doc) {
	const bad = [];
	for (const name of IDEM_ROWS) {
		const m = doc.means[name];
		if (!m || m.reps.length === 0) {
			bad.push(`${name}: no repetitions`);
			continue;
		}
		for (const p of PHASES) {
			const other = Object.keys(m[p]).filter((k) => k !== '1');
			if (other.length) bad.push(`${name} ${p}: ${JSON.stringify(m[p])} (want every repetition 1)`);
		}
	}
	return bad;
}

function fmt(d) {
	return Object.keys(d)
		.sort((a, b) => Number(a) - Number(b))
		.map((k) => `${k}: ${d[k]}×`)
		.join(', ');
}

function table(doc) {
	const rows = [
		'| means | 5 concurrent deliveries | + 1 replay (total) | crash, then redelivery | after a timeout, for a person |',
		'|---|---|---|---|---|',
	];
	for (const m of Object.values(doc.means)) {
		const t = m.timeout_probe
			? `${m.timeout_probe.effects} effect(s); ${m.timeout_probe.left}`
			: '';
		rows.push(`| ${m.label} | ${fmt(m.burst)} | ${fmt(m.replay)} | ${fmt(m.crash)} | ${t} |`);
	}
	return rows.join('\n');
}

const args = process.argv.slice(2);
if (args[0] === '--check') {
	const bad = check(JSON.parse(fs.readFileSync(args[1], 'utf8')));
	for (const b of bad) console.log(`FAIL  ${b}`);
	if (!bad.length)
		console.log(
			`PASS  idem rows (${IDEM_ROWS.join(', ')}): exactly one side effect in every phase`,
		);
	process.exit(bad.length ? 1 : 0);
} else if (args[0] === '--table') {
	console.log(table(JSON.parse(fs.readFileSync(args[1], 'utf8'))));
} else if (require.main === module) {
	const [inFile, outFile, ...pairs] = args;
	const lines = fs
		.readFileSync(inFile, 'utf8')
		.split('\n')
		.filter(Boolean)
		.map((l) => JSON.parse(l));
	const meta = {};
	for (const p of pairs) {
		const i = p.indexOf('=');
		meta[p.slice(0, i)] = p.slice(i + 1);
	}
	const doc = summarize(lines, meta);
	fs.writeFileSync(outFile, `${JSON.stringify(doc, null, 2)}\n`);
	console.log(table(doc));
}

module.exports = { summarize, check, table, distribution };
