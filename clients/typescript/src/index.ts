/**
 * idem-ledger: the TypeScript client of idem, the idempotency gate and side-effect ledger.
 *
 * `Idem` speaks the v1 API (claim, heartbeat, prepare, complete, fail, effect, get,
 * deriveKey, whoami, and the operator calls); `withIdem(key, fn, options)` runs `fn` at most
 * once per key. Refusals are `IdemApiError`s carrying the problem+json `code`. No runtime
 * dependencies: the global `fetch` of Node 20+.
 */
export { DEFAULT_URL, Idem, type IdemOptions } from './client.js';
export {
	BlockedError,
	IdemApiError,
	IdemError,
	IdemProtocolError,
	IdemUnavailableError,
	InProgressError,
	NeedsReviewError,
	NotRunError,
	ResultExpiredError,
} from './errors.js';
export { FailureError, failSignals, retryAfterSeconds, type FailSignals, type FailureOptions } from './signals.js';
export { withIdem, type AttemptContext, type WithIdemOptions } from './with-idem.js';
export type * from './types.js';
