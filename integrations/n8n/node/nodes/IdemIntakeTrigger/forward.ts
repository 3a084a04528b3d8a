/**
 * The pure part of the Idem Intake Trigger: is this request a forward that idem signed, and
 * which event does it carry.
 *
 * idem signs each forward the Standard Webhooks way: `webhook-id` (= the event's key),
 * `webhook-timestamp` (unix seconds), `webhook-signature: v1,<base64 HMAC-SHA256 of
 * "{id}.{timestamp}.{raw body}">` with the source's forward secret (`whsec_` + base64). The
 * invariant kept: nothing reaches the workflow unless one `v1` signature matches one secret
 * (compared in constant time), the timestamp is within the tolerance, and the `Idem-Key`
 * header names the same key that was signed as `webhook-id` (the unsigned header cannot be
 * swapped to another key).
 */
import { createHmac, timingSafeEqual } from 'crypto';

export type Headers = Record<string, string | string[] | undefined>;

export interface ForwardEvent {
	/** The event's key in idem (what the gate keys effects on: `{key}:{effect}`). */
	key: string;
	/** The provider's own event id (absent for sources that key on something else). */
	eventId: string | null;
	/** Which delivery attempt of this event this is: 1, 2, … */
	attempt: number;
	/** The idem source that received the event. */
	source: string | null;
	/** When idem received it from the provider (RFC 3339). */
	receivedAt: string | null;
	/** The signed timestamp (unix seconds). */
	timestamp: number;
}

export type Verdict = { ok: true; event: ForwardEvent } | { ok: false; reason: string };

/** Default tolerance between the signed timestamp and this clock, as the standard suggests. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

function header(headers: Headers, name: string): string | undefined {
	const v = headers[name] ?? headers[name.toLowerCase()];
	if (Array.isArray(v)) return v.length === 1 ? v[0] : undefined;
	return v;
}

/** A `whsec_…` secret (or bare base64) → the HMAC key bytes; undefined when unusable. */
export function secretKey(secret: string): Buffer | undefined {
	const s = secret.trim().replace(/^whsec_/, '');
	if (s === '' || !/^[A-Za-z0-9+/]+={0,2}$/.test(s)) return undefined;
	const key = Buffer.from(s, 'base64');
	return key.length > 0 ? key : undefined;
}

/** The base64 `v1` signature idem makes for (id, timestamp, body) with one secret. */
export function sign(secret: string, id: string, timestamp: number, body: Buffer): string {
	const key = secretKey(secret);
	if (!key) throw new Error('the forward secret is not a whsec_ secret');
	return createHmac('sha256', key)
		.update(Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]))
		.digest('base64');
}

/**
 * Verifies one request. `secrets` may hold several (a rotation: old and new); `nowSeconds` is
 * this clock in unix seconds.
 */
export function verifyForward(
	headers: Headers,
	body: Buffer,
	secrets: string[],
	nowSeconds: number,
	toleranceSeconds: number = DEFAULT_TOLERANCE_SECONDS,
): Verdict {
	const id = header(headers, 'webhook-id');
	const ts = header(headers, 'webhook-timestamp');
	const sig = header(headers, 'webhook-signature');
	if (!id || !ts || !sig)
		return { ok: false, reason: 'missing webhook-id, webhook-timestamp or webhook-signature' };
	if (!/^[0-9]{1,12}$/.test(ts))
		return { ok: false, reason: 'webhook-timestamp is not unix seconds' };
	const timestamp = Number(ts);
	if (Math.abs(nowSeconds - timestamp) > toleranceSeconds) {
		return {
			ok: false,
			reason: `webhook-timestamp is more than ${toleranceSeconds} s from this clock`,
		};
	}
	const keys = secrets.map(secretKey).filter((k): k is Buffer => k !== undefined);
	if (keys.length === 0) return { ok: false, reason: 'no usable forward secret in the credential' };
	const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]);
	const given = sig
		.split(' ')
		.filter((part) => part.startsWith('v1,'))
		.map((part) => Buffer.from(part.slice(3), 'base64'));
	const matched = keys.some((key) => {
		const want = createHmac('sha256', key).update(signed).digest();
		return given.some((g) => g.length === want.length && timingSafeEqual(g, want));
	});
	if (!matched) return { ok: false, reason: 'no v1 signature matches the forward secret' };

	const key = header(headers, 'idem-key');
	if (key !== undefined && key !== id)
		return { ok: false, reason: 'Idem-Key is not the signed webhook-id' };
	const attemptText = header(headers, 'idem-attempt') ?? '1';
	const attempt = /^[1-9][0-9]{0,8}$/.test(attemptText) ? Number(attemptText) : NaN;
	if (Number.isNaN(attempt)) return { ok: false, reason: 'Idem-Attempt is not a positive number' };
	return {
		ok: true,
		event: {
			key: id,
			eventId: header(headers, 'idem-event-id') ?? null,
			attempt,
			source: header(headers, 'idem-source') ?? null,
			receivedAt: header(headers, 'idem-received-at') ?? null,
			timestamp,
		},
	};
}

/** The forward's body for the workflow: parsed JSON when it is JSON, else the text. */
export function parseForwardBody(body: Buffer, contentType: string | undefined): unknown {
	const text = body.toString('utf8');
	if (/\bjson\b/i.test(contentType ?? '') || /^\s*[[{]/.test(text)) {
		try {
			return JSON.parse(text);
		} catch {
			return text;
		}
	}
	return text;
}
