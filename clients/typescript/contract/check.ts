/**
 * The client's types against those generated from the server's `/openapi.json`
 * (`openapi.d.ts`, made by `npm run contract:generate`; CI makes it from a fresh `idem
 * serve`). For each schema: the same member names, the same required members, the same enum
 * values. `tsc -p tsconfig.contract.json` fails on any difference, and on a path the client
 * calls that the server no longer has.
 */
import type { components, paths } from './openapi.js';
import type * as C from '../src/types.js';

type S = components['schemas'];

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
type Assert<T extends true> = T;

type RequiredKeys<T> = { [K in keyof T]-?: {} extends Pick<T, K> ? never : K }[keyof T];
type IsEnum<T> = [T] extends [never] ? false : [T] extends [string] ? (string extends T ? false : true) : false;
type EnumsEqual<A, B> = {
	[K in keyof A & keyof B]: IsEnum<NonNullable<B[K]>> extends true
		? Equal<NonNullable<A[K]>, NonNullable<B[K]>>
		: IsEnum<NonNullable<A[K]>> extends true
			? false
			: true;
}[keyof A & keyof B];

/** `true` when `Client` models `Schema`; otherwise a type naming what differs. */
type Models<Client, Schema> = [
	Equal<keyof Client, keyof Schema>,
	Equal<RequiredKeys<Client>, RequiredKeys<Schema>>,
	Equal<EnumsEqual<Client, Schema>, true>,
] extends [true, true, true]
	? true
	: {
			onlyInClient: Exclude<keyof Client, keyof Schema>;
			onlyInSchema: Exclude<keyof Schema, keyof Client>;
			requiredInClient: RequiredKeys<Client>;
			requiredInSchema: RequiredKeys<Schema>;
		};

export type Checks = [
	Assert<Models<C.ClaimBody, S['ClaimBody']>>,
	Assert<Models<C.ClaimAnswer, S['ClaimResponse']>>,
	Assert<Models<C.IdemRecord, S['RecordDoc']>>,
	Assert<Models<C.LastError, S['LastErrorDoc']>>,
	Assert<Models<C.CostTotals, S['CostTotalsDoc']>>,
	Assert<Models<C.RecordRequest, S['RequestDoc']>>,
	Assert<Models<C.IdemEvent, S['EventDoc']>>,
	Assert<Models<C.EventCost, S['EventCostDoc']>>,
	Assert<Models<C.RecordWithEvents, S['RecordWithEventsDoc']>>,
	Assert<Models<C.RecordPage, S['ListResponse']>>,
	Assert<Models<C.StateAnswer, S['StateResponse']>>,
	Assert<Models<C.RetryDecision, S['RetryDoc']>>,
	Assert<Models<C.FailAnswer, S['FailResponse']>>,
	Assert<Models<C.DeriveAnswer, S['DeriveResponse']>>,
	Assert<Models<C.WhoAmI, S['WhoAmI']>>,
	Assert<Models<C.EffectHttpResponse, S['ResponseDoc']>>,
	Assert<Models<C.EffectAnswer, S['EffectResponse']>>,
	Assert<Models<C.Problem, S['Problem']>>,
	Assert<Models<C.Cost, S['CostBody']>>,
	Assert<Models<C.PrepareBody, S['PrepareBody']>>,
	Assert<Models<C.HeartbeatBody, S['HeartbeatBody']>>,
	Assert<Models<C.CompleteBody, S['CompleteBody']>>,
	Assert<Models<C.FailError, S['FailErrorBody']>>,
	// FailBody's schema adds an anyOf of "what lets the server classify": its first member is the object.
	Assert<Models<C.FailBody, Extract<S['FailBody'], { token: string }>>>,
	Assert<Models<C.DeriveBody, S['DeriveBody']>>,
	Assert<Models<C.EffectRequest, S['EffectRequestBody']>>,
	Assert<Models<C.Reconcile, S['ReconcileBody']>>,
	Assert<Models<C.EffectBody, S['EffectBody']>>,
	Assert<Models<C.ResolveBody, S['ResolveBody']>>,
	Assert<Models<C.NoteBody, S['NoteBody']>>,
	Assert<Equal<C.FailClass, S['ClassDoc']>>,
	Assert<Equal<C.LeaseExpiry, S['LeaseExpiryDoc']>>,
	Assert<Equal<C.Role, S['RoleDoc']>>,
	Assert<Equal<C.ResolveAction, S['ResolveActionDoc']>>,
];

/** The paths the client calls. */
type Called =
	| '/v1/namespaces/{ns}/keys/{key}'
	| '/v1/namespaces/{ns}/keys/{key}/claim'
	| '/v1/namespaces/{ns}/keys/{key}/heartbeat'
	| '/v1/namespaces/{ns}/keys/{key}/prepare'
	| '/v1/namespaces/{ns}/keys/{key}/complete'
	| '/v1/namespaces/{ns}/keys/{key}/fail'
	| '/v1/namespaces/{ns}/keys/{key}/effect'
	| '/v1/namespaces/{ns}/keys/{key}/resolve'
	| '/v1/namespaces/{ns}/keys/{key}/approve'
	| '/v1/namespaces/{ns}/keys/{key}/reject'
	| '/v1/namespaces/{ns}/keys'
	| '/v1/namespaces/{ns}'
	| '/v1/namespaces/{ns}/pause'
	| '/v1/namespaces/{ns}/resume'
	| '/v1/keys/derive'
	| '/v1/whoami';

export type PathChecks = Assert<Equal<Exclude<Called, keyof paths>, never>>;
