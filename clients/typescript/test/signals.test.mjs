// The error → fail-signal mapping on its own (no server): what each kind of error says.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { failSignals, FailureError, retryAfterSeconds } from '../dist/index.js';

const fetchFailed = (code) => new TypeError('fetch failed', { cause: Object.assign(new Error(code), { code }) });

test('fetch errors: refused and DNS never left, a reset may have', () => {
	for (const code of ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH']) {
		const s = failSignals(fetchFailed(code));
		assert.deepEqual([s.error.category, s.sent, s.kind], ['connection', false, undefined], code);
		assert.match(s.error.message, /^TypeError: fetch failed \(caused by Error: /);
	}
	const ct = failSignals(fetchFailed('UND_ERR_CONNECT_TIMEOUT'));
	assert.deepEqual([ct.error.category, ct.sent], ['timeout', false]);
	for (const code of ['ECONNRESET', 'UND_ERR_SOCKET']) {
		const s = failSignals(fetchFailed(code));
		assert.deepEqual([s.error.category, s.sent, s.kind], ['connection', undefined, undefined], code);
	}
	const ht = failSignals(fetchFailed('UND_ERR_HEADERS_TIMEOUT'));
	assert.deepEqual([ht.error.category, ht.sent], ['timeout', undefined]);
});

test('an AbortSignal.timeout() is a timeout that may have been sent', () => {
	const s = failSignals(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
	assert.deepEqual([s.error.category, s.sent, s.kind], ['timeout', undefined, undefined]);
});

test('HTTP statuses from axios-style, n8n-style and FailureError errors', () => {
	const ax = failSignals(Object.assign(new Error('Request failed'), { response: { status: 503, headers: { 'Retry-After': '9' } } }));
	assert.deepEqual([ax.http_status, ax.retry_after, ax.sent], [503, 9, true]);
	const n8n = failSignals(Object.assign(new Error('Bad gateway'), { httpCode: '502' }));
	assert.equal(n8n.http_status, 502);
	const f = failSignals(new FailureError('x', { httpStatus: 429, retryAfter: '3' }));
	assert.deepEqual([f.http_status, f.retry_after, f.kind], [429, 3, undefined]);
});

test('Retry-After as seconds or an HTTP-date', () => {
	assert.equal(retryAfterSeconds('120'), 120);
	const s = retryAfterSeconds(new Date(Date.now() + 60_000).toUTCString());
	assert.ok(s >= 58 && s <= 61, String(s));
	assert.equal(retryAfterSeconds('soon'), undefined);
});

test('kinds: FailureError decides; unknown errors and unknown categories are ambiguous', () => {
	assert.equal(failSignals(new FailureError('x', { kind: 'permanent' })).kind, 'permanent');
	assert.equal(failSignals(new FailureError('x', { category: 'quota' })).kind, 'ambiguous');
	assert.equal(failSignals(new FailureError('x', { category: 'business' })).kind, undefined);
	const u = failSignals(new RangeError('y'.repeat(2000)));
	assert.deepEqual([u.kind, u.error.category, u.error.message.length], ['ambiguous', 'exception', 500]);
	assert.equal(failSignals('a string').kind, 'ambiguous');
});
