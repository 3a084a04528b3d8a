/**
 * Errors: a refusal by idem (problem+json, with its `code`), idem out of reach, an answer the
 * contract does not describe, and the claim outcomes `withIdem` does not turn into a run.
 * None of them ever holds the bearer token.
 */
import type { ClaimAnswer, IdemRecord } from './types.js';

/** Base of every error this library throws. */
export class IdemError extends Error {
	constructor(message: string, options?: { cause?: unknown }) {
		super(message, options);
		this.name = new.target.name;
	}
}

/** idem could not be reached (connection refused, DNS, a timeout talking to idem). */
export class IdemUnavailableError extends IdemError {}

/** idem answered something the contract does not describe. */
export class IdemProtocolError extends IdemError {
	constructor(
		message: string,
		readonly status?: number,
	) {
		super(message);
	}
}

/**
 * idem refused the call: `status`, the machine-readable `code` (`lease_lost`, `invalid_key`,
 * …), the server's `detail`, and the request member it is about (`field`) where there is one.
 */
export class IdemApiError extends IdemError {
	readonly status: number;
	readonly code: string;
	readonly title: string;
	readonly detail: string;
	readonly field: string | null;
	readonly problem: Record<string, unknown>;

	constructor(status: number, problem: Record<string, unknown>) {
		const code = typeof problem.code === 'string' ? problem.code : 'unknown';
		const title = typeof problem.title === 'string' ? problem.title : '';
		const detail = typeof problem.detail === 'string' ? problem.detail : title;
		super(`${status} ${code}: ${detail}`);
		this.status = status;
		this.code = code;
		this.title = title;
		this.detail = detail;
		this.field = typeof problem.field === 'string' ? problem.field : null;
		this.problem = problem;
	}
}

/**
 * A claim answered something other than `acquired` or a replayable `completed`: the function
 * did not run. `answer` is the claim answer.
 */
export class NotRunError extends IdemError {
	readonly outcome: string;
	readonly record: IdemRecord | null;
	readonly retryAfterMs: number | null;

	constructor(
		readonly namespace: string,
		readonly key: string,
		readonly answer: ClaimAnswer,
	) {
		const ms = typeof answer.retry_after_ms === 'number' ? answer.retry_after_ms : null;
		super(`${namespace}/${key}: ${answer.outcome}${ms !== null ? `, retry after ${ms} ms` : ''}`);
		this.outcome = answer.outcome;
		this.record = answer.record ?? null;
		this.retryAfterMs = ms;
	}
}

/**
 * Not now: another worker holds the lease (`in_flight`), a retry is backing off (`backoff`),
 * it waits for approval, the namespace is paused or at its daily limit. Call again later.
 */
export class InProgressError extends NotRunError {}

/** The effect may or may not have happened: a person decides (`idem review`). */
export class NeedsReviewError extends NotRunError {}

/**
 * Never run automatically: `conflict` (same key, different payload), `failed_permanent`
 * (the stored error is in `record.last_error`), or an outcome this version does not know.
 */
export class BlockedError extends NotRunError {}

/** Completed before, but retention dropped the stored result: nothing to replay, never rerun. */
export class ResultExpiredError extends NotRunError {}
