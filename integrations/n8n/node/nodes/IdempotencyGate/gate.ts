/**
 * The pure part of the Idempotency Gate node: which output a claim outcome goes to, how each
 * request to idem is built, and how an n8n error item becomes a `fail` body. No n8n runtime
 * here, so the unit tests exercise it directly.
 *
 * Invariant kept: only `acquired` ever reaches the Proceed output. Every other answer —
 * including ones this version does not know — goes somewhere that does NOT run the side effect.
 */
import type { IDataObject } from 'n8n-workflow';

/** Output index of the Claim operation, in canvas order. */
export const OUTPUT = {
	proceed: 0,
	duplicate: 1,
	busy: 2,
	needsReview: 3,
	blocked: 4,
} as const;

export const CLAIM_OUTPUT_NAMES = ['Proceed', 'Duplicate', 'Busy', 'Needs Review', 'Blocked'];

/** `idem.route` of a claim in single-output mode, in output order. */
export const CLAIM_ROUTES = ['proceed', 'duplicate', 'busy', 'needs_review', 'blocked'];

/**
 * Claim outcome → output.
 * - acquired (fresh or resumed): run the side effect.
 * - completed: already done; the stored result is in `idem.record.result` (answer the provider 200).
 * - in_flight / backoff / awaiting_approval / paused / limited: not now; retry later
 *   (`idem.retry_after_ms` says when, where the server knows).
 * - needs_review: a person must decide whether the effect happened.
 * - conflict (same key, different payload) / failed_permanent: never run automatically.
 */
export function outputForOutcome(outcome: string): number | undefined {
	switch (outcome) {
		case 'acquired':
			return OUTPUT.proceed;
		case 'completed':
			return OUTPUT.duplicate;
		case 'in_flight':
		case 'backoff':
		case 'awaiting_approval':
		case 'paused':
		case 'limited':
			return OUTPUT.busy;
		case 'needs_review':
			return OUTPUT.needsReview;
		case 'conflict':
		case 'failed_permanent':
			return OUTPUT.blocked;
		default:
			return undefined;
	}
}

/** Output index of the Effect operation, in canvas order. */
export const EFFECT_OUTPUT = {
	performed: 0,
	duplicate: 1,
	failed: 2,
	retryLater: 3,
	needsReview: 4,
	blocked: 5,
} as const;

export const EFFECT_OUTPUT_NAMES = [
	'Performed',
	'Duplicate',
	'Failed',
	'Retry Later',
	'Needs Review',
	'Blocked',
];

/** `idem.route` of an effect in single-output mode, in output order. */
export const EFFECT_ROUTES = [
	'performed',
	'duplicate',
	'failed',
	'retry_later',
	'needs_review',
	'blocked',
];

/**
 * Effect outcome → output. idem made (or refused to make) the outbound call itself, so no
 * output runs a side effect: each one says what happened to it.
 * - performed: sent now (or reconciled as landed); the destination's answer is in `idem.response`.
 * - completed: an earlier call already performed it; the stored response is replayed.
 * - failed_permanent: the destination refused it for good (e.g. 402 card declined), now or before.
 * - backoff / in_flight / awaiting_approval / paused / limited: not now; call again later
 *   (`idem.retry_after_ms` says when, where the server knows) — the same key resumes it.
 * - needs_review: it may have happened (timeout, 5xx); a person decides.
 * - conflict: same key, different request: never sent.
 */
export function effectOutputForOutcome(outcome: string): number | undefined {
	switch (outcome) {
		case 'performed':
			return EFFECT_OUTPUT.performed;
		case 'completed':
			return EFFECT_OUTPUT.duplicate;
		case 'failed_permanent':
			return EFFECT_OUTPUT.failed;
		case 'backoff':
		case 'in_flight':
		case 'awaiting_approval':
		case 'paused':
		case 'limited':
			return EFFECT_OUTPUT.retryLater;
		case 'needs_review':
			return EFFECT_OUTPUT.needsReview;
		case 'conflict':
			return EFFECT_OUTPUT.blocked;
		default:
			return undefined;
	}
}

export interface Target {
	baseUrl: string;
	namespace: string;
	key: string;
}

/** `{base}/v1/namespaces/{ns}/keys/{key}/{verb}` with both path segments percent-encoded. */
export function keyUrl(t: Target, verb: string): string {
	const base = t.baseUrl.replace(/\/+$/, '');
	return `${base}/v1/namespaces/${encodeURIComponent(t.namespace)}/keys/${encodeURIComponent(
		t.key,
	)}/${verb}`;
}

/** Same rule as the server (1–255 bytes of visible ASCII), checked before any request. */
export function keyProblem(key: unknown): string | undefined {
	if (typeof key !== 'string' && typeof key !== 'number') {
		return `the key must be a string, got ${key === undefined ? 'nothing (undefined)' : key === null ? 'null' : typeof key}`;
	}
	const s = String(key);
	if (s.length === 0) return 'the key is empty';
	if (Buffer.byteLength(s, 'utf8') > 255)
		return `the key is ${Buffer.byteLength(s, 'utf8')} bytes long (at most 255)`;
	for (let i = 0; i < s.length; i++) {
		const c = s.charCodeAt(i);
		if (c < 0x21 || c > 0x7e) {
			return `the key may only contain visible ASCII (no spaces); character ${JSON.stringify(
				s[i],
			)} at position ${i} is not`;
		}
	}
	return undefined;
}

export function namespaceProblem(ns: unknown): string | undefined {
	if (typeof ns !== 'string' || ns.length === 0) return 'the namespace is empty';
	if (ns.length > 128) return 'the namespace is longer than 128 characters';
	const bad = [...ns].find((c) => !/[A-Za-z0-9._:-]/.test(c));
	if (bad !== undefined)
		return `the namespace may only contain A-Z a-z 0-9 . _ - : (found ${JSON.stringify(bad)})`;
	return undefined;
}

function parseJsonText(text: string): { ok: true; value: unknown } | { ok: false } {
	try {
		return { ok: true, value: JSON.parse(text) };
	} catch {
		return { ok: false };
	}
}

/** A JSON parameter may arrive as an object or as JSON text; '' means "not given". */
export function jsonParam(value: unknown, name: string): unknown {
	if (value === undefined || value === null) return undefined;
	if (typeof value === 'string') {
		const t = value.trim();
		if (t === '') return undefined;
		const parsed = parseJsonText(t);
		if (!parsed.ok) throw new Error(`${name} is not valid JSON`);
		return parsed.value;
	}
	return value;
}

export interface ClaimParams {
	fingerprintMode: 'payload' | 'fingerprint' | 'none';
	payload?: unknown;
	fingerprint?: string;
	owner?: string;
	leaseMs?: number;
	waitMs?: number;
	correlationId?: string;
	leaseExpiry?: string;
}

export function claimBody(p: ClaimParams): IDataObject {
	const body: IDataObject = {};
	if (p.fingerprintMode === 'payload') {
		const payload = jsonParam(p.payload, 'Payload');
		if (payload === undefined) {
			throw new Error(
				'Payload is empty: give the business payload to fingerprint (e.g. {{ $json.body }}), or set Fingerprint to "None"',
			);
		}
		body.payload = payload as IDataObject;
	} else if (p.fingerprintMode === 'fingerprint') {
		const fp = (p.fingerprint ?? '').trim().toLowerCase();
		if (!/^[0-9a-f]{64}$/.test(fp)) {
			throw new Error(
				'Fingerprint must be 64 hex digits (the SHA-256 of the JCS-canonical payload)',
			);
		}
		body.fingerprint = fp;
	}
	if (p.owner) body.owner = String(p.owner);
	if (p.leaseMs) body.lease_ms = p.leaseMs;
	if (p.waitMs) body.wait_ms = p.waitMs;
	if (p.correlationId) body.correlation_id = p.correlationId;
	if (p.leaseExpiry) body.lease_expiry = p.leaseExpiry;
	return body;
}

export function requireToken(token: unknown, operation: string): string {
	if (typeof token !== 'string' || token.trim() === '') {
		throw new Error(
			`No lease token for ${operation}: set Lease Token to the claim's token, e.g. {{ $('Claim').item.json.idem.token }} (the name of your claim node in place of Claim)`,
		);
	}
	return token.trim();
}

export function prepareBody(
	token: string,
	payload: unknown,
	approvalRequired: boolean,
): IDataObject {
	const p = jsonParam(payload, 'Payload');
	if (p === undefined)
		throw new Error('Payload is empty: prepare saves the payload a later attempt must reuse');
	const body: IDataObject = { token, payload: p as IDataObject };
	if (approvalRequired) body.approval_required = true;
	return body;
}

/** Optional parameters arrive as numbers or (from expressions) strings; '' means "not given". */
function given(v: unknown): boolean {
	return v !== undefined && v !== null && String(v).trim() !== '';
}

/**
 * The `cost` member of complete / fail: what this attempt spent (e.g. model tokens of an AI
 * draft, and its price). Both optional; `undefined` when neither is given. Checked here with
 * the server's rules (a non-negative integer of tokens, a non-negative number of dollars) so
 * that a wrong expression fails on the node that has it, with its name.
 */
export function costMember(tokens: unknown, usd: unknown): IDataObject | undefined {
	const cost: IDataObject = {};
	if (given(tokens)) {
		const n = typeof tokens === 'number' ? tokens : Number(String(tokens).trim());
		if (!Number.isSafeInteger(n) || n < 0) {
			throw new Error(`Cost Tokens ${JSON.stringify(tokens)} is not a non-negative whole number`);
		}
		cost.tokens = n;
	}
	if (given(usd)) {
		const n = typeof usd === 'number' ? usd : Number(String(usd).trim());
		if (!Number.isFinite(n) || n < 0) {
			throw new Error(`Cost USD ${JSON.stringify(usd)} is not a non-negative number`);
		}
		cost.usd = n;
	}
	return Object.keys(cost).length ? cost : undefined;
}

export function completeBody(
	token: string,
	result: unknown,
	externalRef?: string,
	cost?: IDataObject,
): IDataObject {
	const body: IDataObject = { token };
	const r = jsonParam(result, 'Result');
	if (r !== undefined) body.result = r as IDataObject;
	if (externalRef !== undefined && externalRef !== null && String(externalRef) !== '') {
		body.external_ref = String(externalRef);
	}
	if (cost !== undefined) body.cost = cost;
	return body;
}

export interface FailParams {
	kind: 'auto' | 'retryable' | 'permanent' | 'ambiguous';
	httpStatus?: unknown;
	category: string; // 'auto' | timeout | connection | validation | auth | business
	sent: 'unknown' | 'yes' | 'no';
	message?: string;
	retryAfter?: string;
	/** The failed item's `error` (n8n error output) — used when category is 'auto'. */
	error?: IDataObject;
	/** What the attempt spent ([`costMember`]). */
	cost?: IDataObject;
}

// Raw socket codes and the texts n8n replaces them with (n8n-workflow's NodeError COMMON_ERRORS).
const NOT_SENT =
	/ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|EADDRNOTAVAIL|ERR_INVALID_URL|refused the connection|connection cannot be established|DNS server returned an error|host is unreachable|address is not available/i;
const TIMEOUT = /ETIMEDOUT|ESOCKETTIMEDOUT|ECONNABORTED|timeout|timed out|connection was aborted/i;
const CONNECTION = /ECONNRESET|EPIPE|socket hang up|closed unexpectedly|network/i;

/** The status n8n left on a failed item, if any (`httpCode` on node errors, a number or string). */
export function statusFromError(error: IDataObject | undefined): number | undefined {
	if (!error) return undefined;
	for (const v of [error.httpCode, error.status, error.statusCode]) {
		const n = typeof v === 'string' ? parseInt(v, 10) : typeof v === 'number' ? v : NaN;
		if (Number.isInteger(n) && n >= 100 && n <= 599) return n;
	}
	return undefined;
}

function parseStatus(v: unknown): number | undefined {
	if (v === undefined || v === null || v === '') return undefined;
	const n = typeof v === 'number' ? v : parseInt(String(v), 10);
	if (!Number.isInteger(n) || n < 100 || n > 599) {
		throw new Error(`HTTP Status ${JSON.stringify(v)} is not an HTTP status code`);
	}
	return n;
}

/**
 * Body of `fail`. The server classifies (kind > http_status > category); this only fills in
 * what n8n knows: the status, and for transport errors whether the request left at all.
 * With nothing to go on it says `ambiguous`: a person decides, nothing is retried blindly.
 */
export function failBody(token: string, p: FailParams): IDataObject {
	const body: IDataObject = { token };
	const status = parseStatus(p.httpStatus) ?? statusFromError(p.error);
	const text = [p.message, p.error?.message, p.error?.description, p.error?.code]
		.filter((x) => typeof x === 'string' && x !== '')
		.join(' ');
	let category = p.category;
	let sent: boolean | undefined = p.sent === 'yes' ? true : p.sent === 'no' ? false : undefined;
	if (category === 'auto') {
		if (status !== undefined) category = 'http';
		else if (NOT_SENT.test(text)) {
			category = 'connection';
			if (sent === undefined) sent = false;
		} else if (TIMEOUT.test(text)) category = 'timeout';
		else if (CONNECTION.test(text)) category = 'connection';
		else category = 'unknown';
	}
	if (p.kind !== 'auto') body.kind = p.kind;
	else if (
		status === undefined &&
		!['timeout', 'connection', 'validation', 'auth', 'business'].includes(category)
	) {
		body.kind = 'ambiguous';
	}
	if (status !== undefined) body.http_status = status;
	if (sent !== undefined) body.sent = sent;
	if (p.retryAfter !== undefined && p.retryAfter !== null && String(p.retryAfter) !== '') {
		body.retry_after = String(p.retryAfter);
	}
	const message = (
		p.message ||
		(p.error?.message as string) ||
		(status ? `HTTP ${status}` : category)
	).slice(0, 500);
	body.error = { category, message };
	if (p.cost !== undefined) body.cost = p.cost;
	return body;
}

/** idem answers problem+json with `code`, `title`, `detail`; turn it into one readable line. */
export function describeProblem(status: number, body: unknown): string {
	if (body && typeof body === 'object') {
		const b = body as IDataObject;
		const parts = [b.code, b.detail ?? b.title].filter(
			(x) => x !== undefined && x !== null && x !== '',
		);
		if (parts.length) return `idem answered ${status}: ${parts.join(': ')}`;
	}
	if (typeof body === 'string' && body.trim() !== '')
		return `idem answered ${status}: ${body.slice(0, 300)}`;
	return `idem answered ${status}`;
}

/** Response bodies are JSON, also when served as application/problem+json. */
export function parseBody(body: unknown): unknown {
	if (typeof body === 'string') {
		try {
			return JSON.parse(body);
		} catch {
			return body;
		}
	}
	if (Buffer.isBuffer(body)) return parseBody((body as Buffer).toString('utf8'));
	return body;
}

export interface EffectParams {
	method: string;
	url: string;
	headers?: Array<{ name?: string; value?: string }>;
	bodyMode: 'json' | 'text' | 'none';
	body?: unknown;
	bodyText?: string;
	/** Header that carries the key; '' = idem's default (`Idempotency-Key`). */
	idempotencyHeader?: string;
	sendIdempotencyHeader?: boolean;
	timeoutMs?: number;
	/** '' = idem's default (2xx); "2xx" or a comma-separated list of statuses. */
	success?: string;
	destinationIdempotent?: '' | 'yes' | 'no';
	reconcileUrl?: string;
	reconcileFound?: string;
	reconcileNotFound?: string;
	owner?: string;
	correlationId?: string;
	waitMs?: number;
}

const EFFECT_METHODS = ['POST', 'PUT', 'PATCH', 'DELETE'];
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function statusList(text: string, what: string): number[] {
	const out: number[] = [];
	for (const part of text.split(',')) {
		const t = part.trim();
		if (t === '') continue;
		const n = Number(t);
		if (!Number.isInteger(n) || n < 100 || n > 599) {
			throw new Error(`${what}: ${JSON.stringify(t)} is not an HTTP status code`);
		}
		out.push(n);
	}
	return out;
}

/**
 * Body of `effect`. Checks what can be checked here (method, URL scheme, header names, status
 * lists) so a typo fails the node before anything is claimed; idem checks the rest (egress
 * policy, sizes) and refuses with a problem that names the field.
 */
export function effectBody(p: EffectParams): IDataObject {
	const method = String(p.method ?? '')
		.trim()
		.toUpperCase();
	if (!EFFECT_METHODS.includes(method)) {
		throw new Error(
			`Method ${JSON.stringify(p.method)} is not one of ${EFFECT_METHODS.join(', ')}`,
		);
	}
	const url = String(p.url ?? '').trim();
	if (!/^https?:\/\/[^\s]+$/i.test(url)) {
		throw new Error(`URL ${JSON.stringify(url)} is not an http(s) URL`);
	}
	const request: IDataObject = { method, url };
	const headers: IDataObject = {};
	const seen = new Set<string>();
	for (const h of p.headers ?? []) {
		const name = String(h?.name ?? '').trim();
		if (name === '') continue;
		if (!HEADER_NAME.test(name))
			throw new Error(`Header name ${JSON.stringify(name)} is not a valid HTTP header name`);
		if (seen.has(name.toLowerCase()))
			throw new Error(`Header ${JSON.stringify(name)} is given twice`);
		seen.add(name.toLowerCase());
		headers[name] = String(h?.value ?? '');
	}
	if (Object.keys(headers).length) request.headers = headers;
	if (p.bodyMode === 'json') {
		const b = jsonParam(p.body, 'Body');
		if (b !== undefined) request.body = b as IDataObject;
	} else if (p.bodyMode === 'text') {
		if (p.bodyText !== undefined && p.bodyText !== null && String(p.bodyText) !== '') {
			request.body_text = String(p.bodyText);
		}
	}
	const body: IDataObject = { request };
	if (p.sendIdempotencyHeader === false) {
		body.idempotency_header = null;
	} else if (p.idempotencyHeader && p.idempotencyHeader.trim() !== '') {
		const name = p.idempotencyHeader.trim();
		if (!HEADER_NAME.test(name))
			throw new Error(`Idempotency header ${JSON.stringify(name)} is not a valid HTTP header name`);
		body.idempotency_header = name;
	}
	if (p.timeoutMs) body.timeout_ms = p.timeoutMs;
	const success = (p.success ?? '').trim();
	if (success !== '') {
		if (success.toLowerCase() === '2xx') body.success = '2xx';
		else {
			const list = statusList(success, 'Success Statuses');
			if (!list.length) throw new Error('Success Statuses is empty');
			body.success = list;
		}
	}
	if (p.destinationIdempotent === 'yes') body.destination_idempotent = true;
	else if (p.destinationIdempotent === 'no') body.destination_idempotent = false;
	const rurl = String(p.reconcileUrl ?? '').trim();
	if (rurl !== '') {
		if (!/^https?:\/\/[^\s]+$/i.test(rurl))
			throw new Error(`Reconcile URL ${JSON.stringify(rurl)} is not an http(s) URL`);
		const found = statusList(p.reconcileFound ?? '', 'Reconcile Found Statuses');
		const notFound = statusList(p.reconcileNotFound ?? '', 'Reconcile Not Found Statuses');
		body.reconcile = {
			method: 'GET',
			url: rurl,
			found: found.length ? found : [200],
			not_found: notFound.length ? notFound : [404],
		};
	}
	if (p.owner) body.owner = String(p.owner);
	if (p.correlationId) body.correlation_id = String(p.correlationId);
	if (p.waitMs) body.wait_ms = p.waitMs;
	return body;
}

/**
 * One sentence per route, for single-output mode: an AI agent reads the tool's answer as text,
 * so it says what happened and what (not) to do next — above all "do not do it again".
 */
const CLAIM_SUMMARY: Record<string, string> = {
	proceed:
		'Acquired: this key is yours. Do the side effect now, then report it with Complete (or Fail) and idem.token.',
	duplicate:
		'Already done: an earlier attempt completed it. Do not do it again; its stored result is idem.record.result.',
	busy: 'Not now: another attempt holds this key, or it waits for a retry time, an approval, a pause or a rate limit. Do not do it now; ask again later (idem.retry_after_ms when known).',
	needs_review:
		'Needs a person: it may already have happened. Do not do it again; a person decides in the review queue.',
	blocked:
		'Refused: this key was used with different data, or it failed for good. Do not retry it under this key.',
};

const EFFECT_SUMMARY: Record<string, string> = {
	performed:
		"Done now: the request was sent once; the destination's answer is idem.response. Do not send it again.",
	duplicate:
		'Already done earlier: nothing was sent again; the stored answer of the first call is idem.response.',
	failed:
		'Refused for good by the destination (e.g. card declined); its answer is idem.response. Do not retry.',
	retry_later:
		'Not done yet: call again later with the same arguments (idem.retry_after_ms when known). Nothing is ever sent twice under one key.',
	needs_review:
		'Unknown whether it happened (timeout or server error at the destination). Do not retry; a person decides in the review queue.',
	blocked: 'Refused: this key was already used with a different request. Nothing was sent.',
};

export function routeSummary(operation: 'claim' | 'effect', route: string): string {
	return (operation === 'claim' ? CLAIM_SUMMARY : EFFECT_SUMMARY)[route] ?? '';
}

/**
 * What a failed request to idem says about why: the socket code and message of the error or of
 * its cause (n8n wraps transport errors of authenticated requests in a NodeApiError whose
 * message is a generic text).
 */
export function transportDetail(error: unknown): string {
	const parts: string[] = [];
	let e = error as { code?: unknown; message?: unknown; cause?: unknown } | undefined;
	for (let depth = 0; e && typeof e === 'object' && depth < 4; depth++) {
		for (const v of [e.code, e.message]) {
			if (typeof v === 'string' && v !== '' && !parts.some((p) => p.includes(v))) parts.push(v);
		}
		e = e.cause as typeof e;
	}
	return parts.join(' ');
}

export interface DeriveParams {
	event: unknown;
	/** JSON pointers, one per line or comma-separated, in order. */
	fields: string;
	prefix?: string;
	suffix?: string;
	hash?: boolean;
}

const AFFIX = /^[\x21-\x7e]{1,255}$/;

/**
 * Body of `POST /v1/keys/derive`. The server derives (the same rule as `idem key derive`);
 * this checks the shape so a typo fails on this node: at least one pointer, each starting with
 * `/`, affixes of visible ASCII.
 */
export function deriveBody(p: DeriveParams): IDataObject {
	const event = jsonParam(p.event, 'Event');
	if (event === undefined) {
		throw new Error(
			'Event is empty: give the data the key is derived from (e.g. {{ $json.body }})',
		);
	}
	const fields = String(p.fields ?? '')
		.split(/[\n,]/)
		.map((f) => f.trim())
		.filter((f) => f !== '');
	if (!fields.length)
		throw new Error('Identity Fields is empty: give at least one JSON pointer, e.g. /id');
	for (const f of fields) {
		if (!f.startsWith('/')) {
			throw new Error(
				`Identity field ${JSON.stringify(f)} is not a JSON pointer (it must start with /, e.g. /data/object/id)`,
			);
		}
	}
	const body: IDataObject = { event: event as IDataObject, fields };
	for (const [name, value] of [
		['Prefix', p.prefix],
		['Suffix', p.suffix],
	] as const) {
		const v = String(value ?? '').trim();
		if (v === '') continue;
		if (!AFFIX.test(v))
			throw new Error(`${name} may only contain visible ASCII (no spaces), at most 255 characters`);
		body[name.toLowerCase()] = v;
	}
	if (p.hash) body.hash = true;
	return body;
}
