/**
 * `Idem`: the v1 API over the global `fetch`, one method per operation, bodies as the API
 * names them (snake_case).
 *
 * Keys and namespaces are percent-encoded as path segments (a key may hold `/`, `?`, `#`,
 * `%`). Claim and effect answers are answers in every status the contract lists (201, 200,
 * 409, 422, 429, 503 with an `outcome`); any other non-2xx is an `IdemApiError` with the
 * problem's `code`. The token goes in the `Authorization` header and never into an error.
 */
import { IdemApiError, IdemProtocolError, IdemUnavailableError } from './errors.js';
import type {
	ClaimAnswer,
	ClaimBody,
	CompleteBody,
	DeriveAnswer,
	DeriveBody,
	EffectAnswer,
	EffectBody,
	EffectRequest,
	FailAnswer,
	FailBody,
	HeartbeatBody,
	PrepareBody,
	RecordPage,
	RecordWithEvents,
	ResolveBody,
	State,
	StateAnswer,
	WhoAmI,
} from './types.js';

export const DEFAULT_URL = 'http://127.0.0.1:7780';
/** Above the server's 30 s cap on `wait_ms`. */
export const DEFAULT_TIMEOUT_MS = 40_000;

export interface IdemOptions {
	/** Default: `IDEM_URL`, else `http://127.0.0.1:7780`. */
	url?: string;
	/** Default: `IDEM_TOKEN`, else none (a server without tokens). */
	token?: string;
	/** Per request; default 40 s. */
	timeoutMs?: number;
	/** Default: the global `fetch`. */
	fetch?: typeof fetch;
}

/** The environment, where there is one (an n8n Code node may have no `process`). */
export function env(name: string): string | undefined {
	const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
	const v = p?.env?.[name];
	return v === undefined || v === '' ? undefined : v;
}

const seg = encodeURIComponent;

function keyPath(ns: string, key: string, verb?: string): string {
	const p = `/v1/namespaces/${seg(ns)}/keys/${seg(key)}`;
	return verb ? `${p}/${verb}` : p;
}

interface Call {
	method: 'GET' | 'POST' | 'PATCH';
	path: string;
	body?: unknown;
	query?: Record<string, string | number | undefined | null>;
	/** Claim and effect: an answer with an `outcome` is not an error, whatever its status. */
	outcomeAnswer?: boolean;
}

export class Idem {
	readonly url: string;
	readonly #token: string | undefined;
	readonly #timeoutMs: number;
	readonly #fetch: typeof fetch;

	constructor(options: IdemOptions = {}) {
		this.url = (options.url ?? env('IDEM_URL') ?? DEFAULT_URL).replace(/\/+$/, '');
		this.#token = options.token ?? env('IDEM_TOKEN');
		this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
		const f = options.fetch ?? globalThis.fetch;
		if (typeof f !== 'function') throw new Error('idem-ledger needs a global fetch (Node 20 or later)');
		this.#fetch = f;
	}

	/** Never shows the token. */
	toString(): string {
		return `Idem(${this.url}, ${this.#token ? 'token' : 'no token'})`;
	}

	toJSON(): { url: string } {
		return { url: this.url };
	}

	async #send<T>(call: Call): Promise<T> {
		let url = this.url + call.path;
		if (call.query) {
			const q = new URLSearchParams();
			for (const [k, v] of Object.entries(call.query)) if (v !== undefined && v !== null) q.set(k, String(v));
			const s = q.toString();
			if (s) url += `?${s}`;
		}
		const headers: Record<string, string> = { accept: 'application/json' };
		if (this.#token) headers.authorization = `Bearer ${this.#token}`;
		if (call.body !== undefined) headers['content-type'] = 'application/json';
		let res: Response;
		let text: string;
		try {
			res = await this.#fetch(url, {
				method: call.method,
				headers,
				body: call.body !== undefined ? JSON.stringify(call.body) : undefined,
				signal: AbortSignal.timeout(this.#timeoutMs),
			});
			text = await res.text();
		} catch (e) {
			const why = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
			throw new IdemUnavailableError(`cannot reach idem at ${this.url}: ${why}`, { cause: e });
		}
		let data: unknown = undefined;
		if (text !== '') {
			try {
				data = JSON.parse(text);
			} catch {
				data = undefined;
			}
		}
		const obj = typeof data === 'object' && data !== null ? (data as Record<string, unknown>) : undefined;
		if (call.outcomeAnswer && obj && 'outcome' in obj) return data as T;
		if (res.ok) {
			if (text !== '' && data === undefined) {
				throw new IdemProtocolError(`idem answered ${res.status} with a body that is not JSON`, res.status);
			}
			return data as T;
		}
		if (obj && typeof obj.code === 'string') throw new IdemApiError(res.status, obj);
		throw new IdemProtocolError(`idem answered ${res.status} without a problem+json body`, res.status);
	}

	// Worker operations.

	/** `POST …/claim`. Every outcome is an answer (only `acquired` means "go"). */
	claim(namespace: string, key: string, body: ClaimBody = {}): Promise<ClaimAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'claim'), body, outcomeAnswer: true });
	}

	heartbeat(namespace: string, key: string, body: HeartbeatBody): Promise<StateAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'heartbeat'), body });
	}

	prepare(namespace: string, key: string, body: PrepareBody): Promise<StateAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'prepare'), body });
	}

	complete(namespace: string, key: string, body: CompleteBody): Promise<StateAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'complete'), body });
	}

	fail(namespace: string, key: string, body: FailBody): Promise<FailAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'fail'), body });
	}

	/** `POST …/effect`: idem sends `request` under the key and stores the response. */
	effect(
		namespace: string,
		key: string,
		request: EffectRequest,
		options: Omit<EffectBody, 'request'> = {},
	): Promise<EffectAnswer> {
		return this.#send({
			method: 'POST',
			path: keyPath(namespace, key, 'effect'),
			body: { ...options, request },
			outcomeAnswer: true,
		});
	}

	/** `GET …`: the record and its events (`not_found` when unknown). */
	get(namespace: string, key: string): Promise<RecordWithEvents> {
		return this.#send({ method: 'GET', path: keyPath(namespace, key) });
	}

	/** `POST /v1/keys/derive`: the stable key from the event's identity fields. */
	async deriveKey(body: DeriveBody): Promise<string> {
		const ans = await this.#send<DeriveAnswer>({ method: 'POST', path: '/v1/keys/derive', body });
		return ans.key;
	}

	whoami(): Promise<WhoAmI> {
		return this.#send({ method: 'GET', path: '/v1/whoami' });
	}

	// Operator operations.

	list(
		namespace: string,
		query: { state?: State; limit?: number; cursor?: string } = {},
	): Promise<RecordPage> {
		return this.#send({ method: 'GET', path: `/v1/namespaces/${seg(namespace)}/keys`, query });
	}

	resolve(namespace: string, key: string, body: ResolveBody): Promise<StateAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'resolve'), body });
	}

	approve(namespace: string, key: string, note?: string): Promise<StateAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'approve'), body: note ? { note } : {} });
	}

	reject(namespace: string, key: string, note?: string): Promise<StateAnswer> {
		return this.#send({ method: 'POST', path: keyPath(namespace, key, 'reject'), body: note ? { note } : {} });
	}

	namespace(namespace: string): Promise<Record<string, unknown>> {
		return this.#send({ method: 'GET', path: `/v1/namespaces/${seg(namespace)}` });
	}

	patchNamespace(namespace: string, policy: Record<string, unknown>): Promise<Record<string, unknown>> {
		return this.#send({ method: 'PATCH', path: `/v1/namespaces/${seg(namespace)}`, body: policy });
	}

	pause(namespace: string, note?: string): Promise<Record<string, unknown>> {
		return this.#send({ method: 'POST', path: `/v1/namespaces/${seg(namespace)}/pause`, body: note ? { note } : {} });
	}

	resume(namespace: string, note?: string): Promise<Record<string, unknown>> {
		return this.#send({ method: 'POST', path: `/v1/namespaces/${seg(namespace)}/resume`, body: note ? { note } : {} });
	}
}
