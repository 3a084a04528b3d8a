/**
 * The v1 API's request bodies and answers, member for member (snake_case, as on the wire).
 *
 * An optional member (`?`) is one the schema does not require. CI generates types from the
 * running server's `/openapi.json` and type-checks these against them (member names,
 * required sets, enum values; see `contract/check.ts`), so a contract change breaks the
 * build, not a user's call.
 */

/** A claim's outcome. Only `acquired` means "run the side effect now". */
export type Outcome =
	| 'acquired'
	| 'completed'
	| 'failed_permanent'
	| 'conflict'
	| 'in_flight'
	| 'backoff'
	| 'needs_review'
	| 'awaiting_approval'
	| 'paused'
	| 'limited';

export type EffectOutcome =
	| 'performed'
	| 'completed'
	| 'failed_permanent'
	| 'backoff'
	| 'needs_review'
	| 'in_flight'
	| 'awaiting_approval'
	| 'conflict'
	| 'paused'
	| 'limited';

export type State =
	| 'processing'
	| 'prepared'
	| 'awaiting_approval'
	| 'completed'
	| 'failed_retryable'
	| 'failed_permanent'
	| 'needs_review';

export type EventType =
	| 'acquired'
	| 'resumed'
	| 'duplicate_hit'
	| 'conflict'
	| 'in_flight'
	| 'prepared'
	| 'completed'
	| 'failed'
	| 'lease_lost'
	| 'moved_to_review'
	| 'resolved'
	| 'approved'
	| 'rejected'
	| 'result_expired'
	| 'alert_sent'
	| 'sent'
	| 'reconciled'
	| 'heartbeat';

export type FailClass = 'retryable' | 'permanent' | 'ambiguous';
export type LeaseExpiry = 'reclaim' | 'review';
export type Role = 'worker' | 'operator' | 'admin';
export type ResolveAction = 'completed' | 'retry' | 'failed_permanent';

/** The problem+json `code` values idem answers with. */
export type ErrorCode =
	| 'invalid_json'
	| 'unknown_field'
	| 'invalid_key'
	| 'invalid_namespace'
	| 'body_too_large'
	| 'invalid_field'
	| 'missing_identity_field'
	| 'not_found'
	| 'lease_lost'
	| 'invalid_transition'
	| 'result_mismatch'
	| 'method_not_allowed'
	| 'unauthorized'
	| 'forbidden'
	| 'store_unavailable'
	| 'internal'
	| 'destination_forbidden'
	| 'request_timeout'
	| 'invalid_signature'
	| 'stale_signature';

// --- answers -----------------------------------------------------------------------------

export interface LastError {
	category: string;
	message: string;
	http_status: number | null;
}

export interface CostTotals {
	tokens: number;
	usd: number;
	retry_tokens: number;
	retry_usd: number;
}

/** `record.request`: what an effect sent (never headers, query string or body). */
export interface RecordRequest {
	method: string;
	url: string;
	idempotency_header: string | null;
}

export interface IdemRecord {
	namespace: string;
	key: string;
	state: State;
	attempt: number;
	fingerprint: string | null;
	owner: string | null;
	correlation_id: string | null;
	lease_expires_at: string | null;
	not_before: string | null;
	prepared_payload: unknown;
	result: unknown;
	result_expired: boolean;
	external_ref: string | null;
	last_error: LastError | null;
	request: RecordRequest | null;
	cost: CostTotals;
	created_at: string;
	updated_at: string;
}

export interface EventCost {
	tokens: number;
	usd: number;
}

export interface IdemEvent {
	seq: number;
	at: string;
	type: EventType;
	from_state: State | null;
	to_state: State | null;
	attempt: number;
	owner: string | null;
	correlation_id: string | null;
	note: string | null;
	actor: string | null;
	cost: EventCost | null;
}

export interface RecordWithEvents {
	record: IdemRecord;
	events: IdemEvent[];
}

export interface RecordPage {
	items: IdemRecord[];
	next_cursor: string | null;
}

export interface ClaimAnswer {
	outcome: Outcome;
	record: IdemRecord | null;
	token?: string | null;
	resumed?: boolean | null;
	retry_after_ms?: number | null;
}

/** The answer to prepare, heartbeat, complete, resolve, approve and reject. */
export interface StateAnswer {
	state: State;
	record: IdemRecord;
}

export interface RetryDecision {
	allowed: boolean;
	attempt: number;
	max_attempts: number;
	not_before: string | null;
}

export interface FailAnswer {
	state: State;
	class: FailClass;
	retry: RetryDecision;
	record: IdemRecord;
}

export interface DeriveAnswer {
	key: string;
}

export interface WhoAmI {
	role: Role;
	namespace: string;
	token_id?: number | null;
}

/** A destination's response as idem stored it. */
export interface EffectHttpResponse {
	status: number;
	headers: Record<string, string>;
	body?: unknown;
	body_base64?: string | null;
	truncated: boolean;
}

export interface EffectAnswer {
	outcome: EffectOutcome;
	response: EffectHttpResponse | null;
	record: IdemRecord | null;
	retry_after_ms?: number | null;
	reconciled?: boolean | null;
}

/** An RFC 9457 problem with idem's machine-readable `code`. */
export interface Problem {
	type: string;
	title: string;
	status: number;
	detail: string;
	code: ErrorCode;
	field?: string | null;
}

// --- request bodies ------------------------------------------------------------------------

/** What one attempt spent: model tokens and/or US dollars. */
export interface Cost {
	tokens?: number | null;
	usd?: number | null;
}

export interface ClaimBody {
	payload?: unknown;
	fingerprint?: string | null;
	owner?: string | null;
	lease_ms?: number | null;
	correlation_id?: string | null;
	lease_expiry?: LeaseExpiry | null;
	wait_ms?: number | null;
}

export interface PrepareBody {
	token: string;
	payload: unknown;
	approval_required?: boolean | null;
}

export interface HeartbeatBody {
	token: string;
	lease_ms?: number | null;
}

export interface CompleteBody {
	token: string;
	result?: unknown;
	external_ref?: string | null;
	cost?: Cost | null;
}

export interface FailError {
	category: string;
	message?: string | null;
}

export interface FailBody {
	token: string;
	kind?: FailClass | null;
	http_status?: number | null;
	retry_after?: number | string | null;
	sent?: boolean | null;
	error?: FailError | null;
	cost?: Cost | null;
}

export interface DeriveBody {
	event: unknown;
	fields: string[];
	prefix?: string | null;
	suffix?: string | null;
	hash?: boolean | null;
}

/** `request` of an effect: what idem sends to the destination. */
export interface EffectRequest {
	method: string;
	url: string;
	headers?: Record<string, string> | null;
	body?: unknown;
	body_text?: string | null;
	body_base64?: string | null;
}

export interface Reconcile {
	url: string;
	found: number[];
	not_found: number[];
	method?: string | null;
	headers?: Record<string, string> | null;
}

export interface EffectBody {
	request: EffectRequest;
	idempotency_header?: string | null;
	timeout_ms?: number | null;
	success?: unknown;
	destination_idempotent?: boolean | null;
	reconcile?: Reconcile | null;
	owner?: string | null;
	correlation_id?: string | null;
	wait_ms?: number | null;
	lease_ms?: number | null;
	cost?: Cost | null;
}

export interface ResolveBody {
	action: ResolveAction;
	note: string;
	result?: unknown;
	external_ref?: string | null;
}

export interface NoteBody {
	note?: string | null;
}
