/**
 * From a thrown error to the signals of a `fail` report, so that idem classifies it.
 *
 * The server decides (`kind` > `http_status` > `error.category`); this only says what the
 * error shows: an HTTP status and `Retry-After` (on `FailureError`, axios-style
 * `error.response`, or `status` / `statusCode` / n8n's `httpCode`), a timeout, a connection
 * failure, and whether the request certainly never left (`sent: false`: connection refused,
 * DNS failure, a connect timeout). A timeout or a reset after sending stays ambiguous, so idem
 * sends it to review unless the destination is idempotent. With nothing to go on the report
 * says `kind: ambiguous`. The `cause` chain is searched too (`fetch` puts the socket error
 * there). The texts recognised are the n8n node's.
 */
import type { FailBody, FailClass } from './types.js';

const MAX_MESSAGE = 500;
const KNOWN_CATEGORIES = new Set(['timeout', 'connection', 'validation', 'auth', 'business']);

export interface FailureOptions {
	kind?: FailClass;
	httpStatus?: number;
	retryAfter?: number | string;
	category?: string;
	sent?: boolean;
	cause?: unknown;
}

/** Throw (or extend) to tell idem how a failure is to be treated. */
export class FailureError extends Error {
	readonly kind?: FailClass;
	readonly httpStatus?: number;
	readonly retryAfter?: number | string;
	readonly category?: string;
	readonly sent?: boolean;

	constructor(message: string, options: FailureOptions = {}) {
		super(message, options.cause !== undefined ? { cause: options.cause } : undefined);
		this.name = new.target.name;
		this.kind = options.kind;
		this.httpStatus = options.httpStatus;
		this.retryAfter = options.retryAfter;
		this.category = options.category;
		this.sent = options.sent;
	}

	/** A non-2xx `fetch` response as a failure: its status and `Retry-After`. */
	static fromResponse(response: Response, message?: string): FailureError {
		return new FailureError(message ?? `HTTP ${response.status} from ${new URL(response.url || 'http://x/').host}`, {
			httpStatus: response.status,
			retryAfter: response.headers.get('retry-after') ?? undefined,
			category: 'http',
			sent: true,
		});
	}
}

// Raw socket codes and the texts n8n replaces them with.
const NOT_SENT_CODES = new Set([
	'ECONNREFUSED',
	'ENOTFOUND',
	'EAI_AGAIN',
	'EHOSTUNREACH',
	'ENETUNREACH',
	'EADDRNOTAVAIL',
	'ERR_INVALID_URL',
	'UND_ERR_CONNECT_TIMEOUT',
]);
const NOT_SENT =
	/ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|EADDRNOTAVAIL|ERR_INVALID_URL|refused the connection|connection cannot be established|DNS server returned an error|host is unreachable|address is not available/i;
const TIMEOUT_CODES = new Set(['ETIMEDOUT', 'ESOCKETTIMEDOUT', 'ECONNABORTED', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);
const TIMEOUT = /ETIMEDOUT|ESOCKETTIMEDOUT|ECONNABORTED|timeout|timed out|connection was aborted/i;
const CONNECTION_CODES = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED']);
const CONNECTION = /ECONNRESET|EPIPE|socket hang up|closed unexpectedly|other side closed/i;

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
	return typeof v === 'object' && v !== null;
}

function chain(err: unknown): unknown[] {
	const out: unknown[] = [];
	let cur: unknown = err;
	while (cur !== undefined && cur !== null && !out.includes(cur) && out.length < 10) {
		out.push(cur);
		cur = isObj(cur) ? cur.cause : undefined;
	}
	return out;
}

function describe(err: unknown): string {
	if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
	return String(err);
}

function statusOf(e: Obj): number | undefined {
	const response = isObj(e.response) ? e.response : undefined;
	for (const v of [e.httpStatus, response?.status, e.status, e.statusCode, e.httpCode]) {
		const n = typeof v === 'string' ? parseInt(v, 10) : typeof v === 'number' ? v : NaN;
		if (Number.isInteger(n) && n >= 100 && n <= 599) return n;
	}
	return undefined;
}

function header(headers: unknown, name: string): string | undefined {
	if (!headers) return undefined;
	if (typeof (headers as Headers).get === 'function') {
		return (headers as Headers).get(name) ?? undefined;
	}
	if (isObj(headers)) {
		for (const [k, v] of Object.entries(headers)) {
			if (k.toLowerCase() === name && (typeof v === 'string' || typeof v === 'number')) return String(v);
		}
	}
	return undefined;
}

/** `Retry-After` (seconds or an HTTP-date) as whole seconds from now. */
export function retryAfterSeconds(v: unknown): number | undefined {
	if (v === undefined || v === null || v === '') return undefined;
	const s = String(v).trim();
	if (/^\d+$/.test(s)) return Math.min(parseInt(s, 10), 316_224_000);
	const at = Date.parse(s);
	if (Number.isNaN(at)) return undefined;
	return Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

export type FailSignals = Omit<FailBody, 'token'>;

function signal(category: string, sent: boolean | undefined, message: string): FailSignals {
	const out: FailSignals = {};
	if (sent !== undefined) out.sent = sent;
	out.error = { category, message };
	return out;
}

function probe(e: unknown, message: string): FailSignals | undefined {
	if (!isObj(e)) return undefined;
	if (e instanceof FailureError) {
		const out: FailSignals = {};
		if (e.kind) out.kind = e.kind;
		if (e.httpStatus !== undefined) out.http_status = e.httpStatus;
		const ra = retryAfterSeconds(e.retryAfter);
		if (ra !== undefined) out.retry_after = ra;
		if (e.sent !== undefined) out.sent = e.sent;
		const category = e.category ?? (e.httpStatus !== undefined ? 'http' : 'failure');
		out.error = { category, message };
		if (!out.kind && out.http_status === undefined && !KNOWN_CATEGORIES.has(category)) out.kind = 'ambiguous';
		return out;
	}
	const status = statusOf(e);
	if (status !== undefined && status >= 400) {
		const response = isObj(e.response) ? e.response : undefined;
		const out: FailSignals = { http_status: status, sent: true };
		const ra = retryAfterSeconds(header(response?.headers, 'retry-after') ?? header(e.headers, 'retry-after'));
		if (ra !== undefined) out.retry_after = ra;
		out.error = { category: 'http', message };
		return out;
	}
	const name = typeof e.name === 'string' ? e.name : '';
	const code = typeof e.code === 'string' ? e.code : '';
	const text = [e.message, e.description, code].filter((x) => typeof x === 'string' && x !== '').join(' ');
	// AbortSignal.timeout() rejects fetch with a TimeoutError; the request may have left.
	if (name === 'TimeoutError') return signal('timeout', code === 'UND_ERR_CONNECT_TIMEOUT' ? false : undefined, message);
	if (NOT_SENT_CODES.has(code)) return signal(code === 'UND_ERR_CONNECT_TIMEOUT' ? 'timeout' : 'connection', false, message);
	if (TIMEOUT_CODES.has(code)) return signal('timeout', undefined, message);
	if (CONNECTION_CODES.has(code)) return signal('connection', undefined, message);
	if (name === 'AbortError') return undefined; // look at the cause, else ambiguous
	if (NOT_SENT.test(text)) return signal('connection', false, message);
	if (TIMEOUT.test(text)) return signal('timeout', undefined, message);
	if (CONNECTION.test(text)) return signal('connection', undefined, message);
	return undefined;
}

/** The members of a `fail` body (all but `token`) that describe `err`. */
export function failSignals(err: unknown): FailSignals {
	const top = describe(err).slice(0, MAX_MESSAGE);
	for (const e of chain(err)) {
		const message = e === err ? top : `${top} (caused by ${describe(e)})`.slice(0, MAX_MESSAGE);
		// fetch's own "TypeError: fetch failed" says nothing: its cause does.
		const found = probe(e, message);
		if (found) return found;
	}
	return { kind: 'ambiguous', error: { category: 'exception', message: top } };
}
