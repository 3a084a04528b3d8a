// A real `idem serve` for the tests: the binary from IDEM_BIN, a free loopback port, a fresh
// SQLite file in a temporary directory, a clean environment (no IDEM_* settings leak in).
// Without IDEM_BIN the suite fails rather than skipping: a client test that did not talk to
// a server has shown nothing.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

function cleanEnv() {
	return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('IDEM_')));
}

export function freePort() {
	return new Promise((resolve, reject) => {
		const s = createServer();
		s.once('error', reject);
		s.listen(0, '127.0.0.1', () => {
			const { port } = s.address();
			s.close(() => resolve(port));
		});
	});
}

export async function startIdem() {
	const bin = process.env.IDEM_BIN;
	if (!bin || !existsSync(bin)) throw new Error('set IDEM_BIN to an idem binary (the tests run against a real idem serve)');
	const dir = mkdtempSync(join(tmpdir(), 'idem-ts-'));
	const db = `sqlite://${join(dir, 'idem.db')}`;
	const port = await freePort();
	const logFile = join(dir, 'serve.log');
	const log = openSync(logFile, 'w');
	const child = spawn(bin, ['serve', '--listen', `127.0.0.1:${port}`, '--db', db, '--janitor-interval', '1s'], {
		env: cleanEnv(),
		stdio: ['ignore', log, log],
	});
	const url = `http://127.0.0.1:${port}`;
	const deadline = Date.now() + 30_000;
	for (;;) {
		if (child.exitCode !== null) throw new Error(`idem serve exited: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
		try {
			const r = await fetch(`${url}/readyz`);
			if (r.ok) break;
		} catch {
			// not listening yet
		}
		if (Date.now() > deadline) throw new Error('idem serve did not become ready within 30 s');
		await new Promise((r) => setTimeout(r, 50));
	}
	return {
		url,
		token(namespace, role) {
			return execFileSync(bin, ['token', 'create', '--namespace', namespace, '--role', role, '--db', db], {
				env: cleanEnv(),
				encoding: 'utf8',
			}).trim();
		},
		async stop() {
			if (child.exitCode === null) {
				const done = new Promise((r) => child.once('exit', r));
				child.kill('SIGTERM');
				await done;
			}
			rmSync(dir, { recursive: true, force: true });
		},
	};
}

/** A fresh namespace per test, so tests never see each other's keys. */
export function freshNs() {
	return `t-${randomBytes(6).toString('hex')}`;
}
