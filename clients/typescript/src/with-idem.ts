/**
 * `withIdem(key, fn, options)`: run `fn` at most once per key, across processes, through the
 * ledger.
 *
 * - `acquired` (fresh or resumed): `fn` runs while the lease is kept alive by a heartbeat
 *   every third of the lease; its JSON value is stored with `complete` and returned.
 * - `completed`: `fn` does not run; the stored result is returned (a duplicate).
 * - an error thrown by `fn` is reported with `fail` — its signals mapped so idem classifies
 *   it (see `failSignals`) — and then re-thrown unchanged.
 * - every other outcome throws without running: `InProgressError` (in flight, backing off,
 *   awaiting approval, paused, limited), `NeedsReviewError`, `BlockedError` (conflict,
 *   failed_permanent), `ResultExpiredError`.
 *
 * What it must never do: run `fn` on any outcome but `acquired`, or swallow its error. When
 * a heartbeat learns the lease is lost, `ctx.signal` aborts so `fn` can stop early.
 */
import { Idem, env } from './client.js';
import {
	BlockedError,
	IdemApiError,
	IdemError,
	InProgressError,
	NeedsReviewError,
	NotRunError,
	ResultExpiredError,
} from './errors.js';
import { failSignals, type FailSignals } from './signals.js';
import type { ClaimAnswer, IdemRecord, LeaseExpiry } from './types.js';

const DEFAULT_LEASE_MS = 30_000;
const MIN_BEAT_MS = 50;
const BUSY = new Set(['in_flight', 'backoff', 'awaiting_approval', 'paused', 'limited']);

/** What `fn` gets to know about the attempt it runs. */
export interface AttemptContext {
	namespace: string;
	key: string;
	/** 1 for a fresh key, +1 for every resume. */
	attempt: number;
	resumed: boolean;
	/** A `prepared` payload saved by an earlier attempt (reuse it), else null. */
	preparedPayload: unknown;
	/** Aborted when a heartbeat finds the lease lost (someone else holds the key now). */
	signal: AbortSignal;
	/** The fencing token, for `prepare` through `client`. */
	token: string;
	client: Idem;
}

export interface WithIdemOptions<T> {
	/** Default: `IDEM_NAMESPACE`. */
	namespace?: string;
	/** Default: a client from `IDEM_URL` / `IDEM_TOKEN`. */
	client?: Idem;
	/** Fingerprinted: same key + different payload is refused as `conflict`. */
	payload?: unknown;
	leaseMs?: number;
	/** Concurrent callers wait up to this long for the holder and return its result. */
	waitMs?: number;
	owner?: string;
	correlationId?: string;
	leaseExpiry?: LeaseExpiry;
	/** How the value is stored (default: as is; it must be JSON). */
	toJSON?: (value: T) => unknown;
	/** How a stored result is turned back into a value (default: as is). */
	fromJSON?: (stored: unknown) => T;
	/** Your own fail signals for an error (`undefined`: the built-in mapping). */
	classify?: (error: unknown) => FailSignals | undefined;
}

function leaseMsOf(answer: ClaimAnswer, asked?: number): number {
	if (asked) return asked;
	const r = answer.record;
	if (r?.lease_expires_at && r.updated_at) {
		const ms = Date.parse(r.lease_expires_at) - Date.parse(r.updated_at);
		if (Number.isFinite(ms) && ms > 0) return ms;
	}
	return DEFAULT_LEASE_MS;
}

function notRun(ns: string, key: string, answer: ClaimAnswer): NotRunError {
	if (BUSY.has(answer.outcome)) return new InProgressError(ns, key, answer);
	if (answer.outcome === 'needs_review') return new NeedsReviewError(ns, key, answer);
	return new BlockedError(ns, key, answer);
}

let defaultClient: Idem | undefined;

export async function withIdem<T>(
	key: string,
	fn: (ctx: AttemptContext) => T | Promise<T>,
	options: WithIdemOptions<T> = {},
): Promise<T> {
	const namespace = options.namespace ?? env('IDEM_NAMESPACE');
	if (!namespace) throw new IdemError('withIdem needs a namespace (options.namespace or IDEM_NAMESPACE)');
	if (typeof key !== 'string' || key === '') throw new IdemError('withIdem needs a key (a non-empty string)');
	const client = options.client ?? (defaultClient ??= new Idem());
	const fromJSON = options.fromJSON ?? ((v: unknown) => v as T);

	const answer = await client.claim(namespace, key, {
		payload: options.payload,
		lease_ms: options.leaseMs,
		wait_ms: options.waitMs,
		owner: options.owner,
		correlation_id: options.correlationId,
		lease_expiry: options.leaseExpiry,
	});
	if (answer.outcome === 'completed') {
		const record = answer.record as IdemRecord;
		if (record.result_expired) throw new ResultExpiredError(namespace, key, answer);
		return fromJSON(record.result);
	}
	if (answer.outcome !== 'acquired') throw notRun(namespace, key, answer);
	const token = answer.token;
	if (typeof token !== 'string') throw new IdemError('idem answered acquired without a token');

	const lost = new AbortController();
	const beatMs = Math.max(MIN_BEAT_MS, Math.floor(leaseMsOf(answer, options.leaseMs) / 3));
	let beating: Promise<unknown> = Promise.resolve();
	const timer = setInterval(() => {
		beating = client
			.heartbeat(namespace, key, { token, lease_ms: options.leaseMs })
			.catch((e: unknown) => {
				if (e instanceof IdemApiError && e.code === 'lease_lost') {
					clearInterval(timer);
					lost.abort(e);
				}
				// Anything else (idem briefly out of reach): the next beat may land.
			});
	}, beatMs);
	// A heartbeat never keeps a process alive on its own.
	(timer as { unref?: () => void }).unref?.();
	const stop = async () => {
		clearInterval(timer);
		await beating;
	};

	let value: T;
	try {
		value = await fn({
			namespace,
			key,
			attempt: answer.record?.attempt ?? 1,
			resumed: answer.resumed === true,
			preparedPayload: answer.record?.prepared_payload ?? null,
			signal: lost.signal,
			token,
			client,
		});
	} catch (err) {
		await stop();
		const signals = options.classify?.(err) ?? failSignals(err);
		try {
			await client.fail(namespace, key, { ...signals, token });
		} catch (report) {
			if (err instanceof Error) {
				const why = report instanceof Error ? report.message : String(report);
				err.message += ` [idem: this failure could not be reported: ${why}]`;
			}
		}
		throw err;
	}
	await stop();
	let stored: unknown;
	try {
		stored = options.toJSON ? options.toJSON(value) : value;
		JSON.stringify(stored);
	} catch (e) {
		// The effect happened: the ledger must say so even though the value cannot be kept.
		await client.complete(namespace, key, { token });
		throw new TypeError(
			`completed ${namespace}/${key} without a stored result: the value is not JSON (${(e as Error).message}); give withIdem a toJSON`,
		);
	}
	await client.complete(namespace, key, stored === undefined ? { token } : { token, result: stored });
	return value;
}
