// The operator console in a real headless Chromium against a real `idem serve`.
//
// Started by .ci/console-browser.sh, which passes the server and the tokens in the
// environment: IDEM_BASE (http://127.0.0.1:PORT), IDEM_ADMIN, IDEM_OPERATOR, IDEM_WORKER,
// IDEM_SCOPED (an operator token of namespace "pay"), CHROMIUM (the browser binary) and
// optionally IDEM_SHOTS (a directory for the screenshots of docs/console.md).
//
// Every page is watched: each request URL is recorded (none may leave the origin) and a
// dialog listener fails the test if any dialog opens (escaped client data never runs).
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createHmac } from 'node:crypto';
import http from 'node:http';
import { chromium } from 'playwright-core';

const BASE = process.env.IDEM_BASE;
const T = {
  admin: process.env.IDEM_ADMIN,
  operator: process.env.IDEM_OPERATOR,
  worker: process.env.IDEM_WORKER,
  scoped: process.env.IDEM_SCOPED,
};
const SHOTS = process.env.IDEM_SHOTS;
const ORIGIN = new URL(BASE).origin;

let browser;
const open = [];

async function api(method, p, body, token = T.admin) {
  const r = await fetch(BASE + p, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

const keyPath = (ns, key) => `/v1/namespaces/${ns}/keys/${encodeURIComponent(key)}`;
const recordUrl = (ns, key) => `${BASE}/console/ns/${ns}/keys/${encodeURIComponent(key)}`;

async function toReview(ns, key, owner) {
  const c = await api('POST', keyPath(ns, key) + '/claim', { owner });
  assert.equal(c.status, 201, c.text);
  const f = await api('POST', keyPath(ns, key) + '/fail', {
    token: c.json.token, kind: 'ambiguous',
    error: { category: 'timeout', message: 'gateway timed out after 30 s' },
  });
  assert.equal(f.json.state, 'needs_review', f.text);
}

async function state(ns, key) {
  return (await api('GET', keyPath(ns, key))).json.record.state;
}

/** A fresh browser context with its request log and dialog watch. */
async function newPage() {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await ctx.newPage();
  const w = { ctx, page, requests: [], dialogs: [] };
  page.on('request', (r) => w.requests.push(r.url()));
  page.on('dialog', (d) => { w.dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  open.push(w);
  return w;
}

async function signIn(page, token) {
  await page.goto(BASE + '/console/login');
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

async function shot(page, name) {
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  await toReview('pay', 'evt_1001:charge', 'n8n-exec-4711');
  await toReview('pay', 'evt_1002:charge', 'n8n-exec-4712');
  await toReview('pay', 'evt_1003:charge', 'n8n-exec-4713');
  await toReview('other', 'evt_9:refund', 'n8n-exec-9');
  await toReview('xss', '<script>alert(1)</script>', '<img src=x onerror=alert(1)>');
  const c = await api('POST', keyPath('mail', 'order-847:followup:v1') + '/claim', {});
  const p = await api('POST', keyPath('mail', 'order-847:followup:v1') + '/prepare', {
    token: c.json.token, approval_required: true,
    payload: { to: 'ada@example.com', subject: 'About your order 847',
      body: 'Hello Ada,\n\nyour order 847 shipped today. Tracking: 1Z999.\n\nBest, the shop' },
  });
  assert.equal(p.json.state, 'awaiting_approval', p.text);
  assert.equal((await api('POST', keyPath('ops', 'nightly:2026-12-01') + '/claim', {})).status, 201);
});

afterEach(() => {
  // Checked after every test: nothing left the origin, no dialog fired.
  for (const w of open.splice(0)) {
    for (const u of w.requests) assert.equal(new URL(u).origin, ORIGIN, `request left the origin: ${u}`);
    assert.deepEqual(w.dialogs, [], 'a dialog fired');
    w.ctx.close().catch(() => {});
  }
});

after(async () => { await browser?.close(); });

test('sign-in: operator and admin tokens open the console, worker and wrong ones do not', async () => {
  const { page } = await newPage();
  const r = await page.goto(BASE + '/console');
  assert.equal(r.status(), 401);
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  assert.equal(await page.getByText('evt_1001').count(), 0, 'no data before sign-in');
  await shot(page, 'sign-in');

  for (const [token, message] of [[T.worker, 'worker token cannot open the console'], ['idem_wrong', 'Unknown token']]) {
    const { page } = await newPage();
    await signIn(page, token);
    await page.getByRole('alert').filter({ hasText: message }).waitFor();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    assert.equal(await page.getByRole('heading', { name: 'Namespaces' }).count(), 0);
  }
  for (const token of [T.operator, T.admin]) {
    const { page, ctx } = await newPage();
    await signIn(page, token);
    await page.getByRole('heading', { name: 'Namespaces' }).waitFor();
    await page.getByRole('link', { name: 'pay', exact: true }).waitFor();
    const cookie = (await ctx.cookies()).find((c) => c.name === 'idem_session');
    assert.ok(cookie && cookie.httpOnly && cookie.sameSite === 'Strict' && cookie.path === '/console');
    if (token === T.admin) {
      await shot(page, 'overview');
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByRole('heading', { name: 'Sign in' }).waitFor();
      const again = await page.goto(BASE + '/console');
      assert.equal(again.status(), 401, 'signed out');
    }
  }
});

test('a needs_review record resolved with a note is seen through the API', async () => {
  const { page } = await newPage();
  await signIn(page, T.operator);
  await page.goto(BASE + '/console/review');
  await page.getByRole('heading', { name: 'Review queue' }).waitFor();
  await shot(page, 'review-queue');
  await page.getByRole('link', { name: 'evt_1001:charge' }).click();
  await page.getByRole('heading', { name: 'evt_1001:charge' }).waitFor();
  await page.getByRole('heading', { name: 'History' }).waitFor();
  await shot(page, 'record-needs-review');
  const form = page.getByRole('form', { name: 'Resolve' });
  await form.getByLabel('Action').selectOption('completed');
  await form.getByLabel('External ref').fill('ch_3QX1');
  await form.getByLabel('Result (JSON)').fill('{"charge": "ch_3QX1"}');
  await form.getByLabel('Note').fill('Charge ch_3QX1 found in Stripe; it happened once.');
  await form.getByRole('button', { name: 'Resolve' }).click();
  await page.getByRole('status').filter({ hasText: 'Done: resolved' }).waitFor();
  await shot(page, 'record-resolved');
  const rec = await api('GET', keyPath('pay', 'evt_1001:charge'), undefined, T.operator);
  assert.equal(rec.json.record.state, 'completed');
  assert.equal(rec.json.record.external_ref, 'ch_3QX1');
  const last = rec.json.events.at(-1);
  assert.equal(last.type, 'resolved');
  assert.equal(last.note, 'Charge ch_3QX1 found in Stripe; it happened once.');
});

test('resolve without a note is refused with the API message and changes nothing', async () => {
  const { page } = await newPage();
  await signIn(page, T.operator);
  await page.goto(recordUrl('pay', 'evt_1002:charge'));
  const form = page.getByRole('form', { name: 'Resolve' });
  await form.getByLabel('Action').selectOption('retry');
  await form.getByRole('button', { name: 'Resolve' }).click();
  await page.getByRole('alert').filter({ hasText: 'note' }).waitFor();
  await page.getByRole('heading', { name: 'evt_1002:charge' }).waitFor();
  await shot(page, 'record-refused');
  assert.equal(await state('pay', 'evt_1002:charge'), 'needs_review');
});

test('a draft awaiting approval is shown in full and approved', async () => {
  const { page } = await newPage();
  await signIn(page, T.operator);
  await page.goto(recordUrl('mail', 'order-847:followup:v1'));
  await page.getByRole('heading', { name: 'Draft to approve' }).waitFor();
  await page.getByText('your order 847 shipped today').waitFor();
  await shot(page, 'record-awaiting-approval');
  const form = page.getByRole('form', { name: 'Approve or reject' });
  await form.getByLabel('Note').fill('Wording checked.');
  await form.getByRole('button', { name: 'Approve' }).click();
  await page.getByRole('status').filter({ hasText: 'Done: approved' }).waitFor();
  const rec = await api('GET', keyPath('mail', 'order-847:followup:v1'));
  assert.equal(rec.json.record.state, 'prepared');
  assert.equal(rec.json.events.at(-1).type, 'approved');
});

test('pause asks to confirm, then a claim gets 503', async () => {
  const { page } = await newPage();
  await signIn(page, T.operator);
  await page.goto(BASE + '/console/ns/ops');
  await page.getByRole('heading', { name: 'Policy' }).waitFor();
  await shot(page, 'namespace');
  await page.getByRole('button', { name: 'Pause' }).click();
  await page.getByRole('button', { name: 'Confirm' }).waitFor();
  await shot(page, 'pause-confirm');
  assert.equal((await api('GET', '/v1/namespaces/ops')).json.paused, false, 'not before Confirm');
  await page.getByLabel('Note').fill('Incident 12: the CRM is down.');
  await page.getByRole('button', { name: 'Confirm' }).click();
  await page.getByRole('button', { name: 'Resume' }).waitFor();
  const claim = await api('POST', keyPath('ops', 'nightly:2026-12-02') + '/claim', {});
  assert.equal(claim.status, 503, claim.text);
  assert.equal(claim.json.outcome, 'paused');
  await page.getByRole('button', { name: 'Resume' }).click();
  await page.getByRole('button', { name: 'Confirm' }).click();
  await page.getByRole('button', { name: 'Pause' }).waitFor();
  assert.equal((await api('POST', keyPath('ops', 'nightly:2026-12-02') + '/claim', {})).status, 201);
});

test('a POST without the CSRF token is refused and changes nothing', async () => {
  const { page } = await newPage();
  await signIn(page, T.operator);
  await page.goto(recordUrl('pay', 'evt_1003:charge'));
  const form = page.getByRole('form', { name: 'Resolve' });
  await form.locator('input[name=csrf]').evaluate((e) => e.remove());
  await form.getByLabel('Note').fill('should not land');
  await form.getByRole('button', { name: 'Resolve' }).click();
  await page.getByRole('heading', { name: '403 Forbidden' }).waitFor();
  await shot(page, 'csrf-refused');
  assert.equal(await state('pay', 'evt_1003:charge'), 'needs_review');
  // The same with the session cookie, straight from the browser context.
  const r = await page.request.post(BASE + '/console/ns/pay/pause', { form: { note: 'x' } });
  assert.equal(r.status(), 403);
  assert.equal((await api('GET', '/v1/namespaces/pay')).json.paused, false);
});

test('keys, owners and notes holding <script> / onerror= render as text', async () => {
  const { page } = await newPage();
  await signIn(page, T.operator);
  const key = '<script>alert(1)</script>';
  await page.goto(BASE + '/console/review?namespace=xss');
  await page.getByRole('link', { name: key }).click();
  await page.getByRole('heading', { name: key }).waitFor();
  await page.getByText('<img src=x onerror=alert(1)>').first().waitFor();
  const form = page.getByRole('form', { name: 'Resolve' });
  await form.getByLabel('Action').selectOption('failed_permanent');
  await form.getByLabel('Note').fill('"><script>alert(2)</script><img src=x onerror=alert(3)>');
  await form.getByRole('button', { name: 'Resolve' }).click();
  await page.getByRole('status').filter({ hasText: 'Done: resolved' }).waitFor();
  await page.getByText('"><script>alert(2)</script><img src=x onerror=alert(3)>').waitFor();
  assert.equal(await page.locator('img').count(), 0, 'no element was injected');
  assert.equal(await page.locator('main script').count(), 0);
  await shot(page, 'escaping');
});

test('scope: another namespace is neither listed nor reachable', async () => {
  const { page } = await newPage();
  await signIn(page, T.scoped);
  await page.getByRole('heading', { name: 'Namespaces' }).waitFor();
  await page.getByRole('link', { name: 'pay', exact: true }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'other', exact: true }).count(), 0);
  await page.goto(BASE + '/console/review');
  assert.equal(await page.getByText('evt_9:refund').count(), 0);
  for (const url of [BASE + '/console/ns/other', recordUrl('other', 'evt_9:refund'), BASE + '/console/review?namespace=other']) {
    const r = await page.goto(url);
    assert.equal(r.status(), 403, url);
    assert.equal(r.headers()['x-frame-options'], 'DENY');
    assert.ok(r.headers()['content-security-policy'].startsWith("default-src 'self'"));
    assert.equal(await page.getByText('evt_9:refund').count(), 0);
  }
  await shot(page, 'scope-forbidden');
});

test('a held webhook is redelivered with a note from its event page, seen through the API', async () => {
  const secret = 'whsec_console_browser_secret_1';
  const put = await api('PUT', '/v1/sources/shop-hooks', {
    provider: 'stripe', namespace: 'shop', secrets: [secret],
    forward: { url: 'http://127.0.0.1:9/hook', timeout_ms: 1000, retry: { base_ms: 1, max_ms: 1 } },
  });
  assert.equal(put.status, 201, put.text);
  // A real signed POST /in/ without an event id: held in needs_review, nothing forwarded.
  const body = '{"type":"order.paid","note":"<img src=x onerror=alert(1)>"}';
  const t = Math.floor(Date.now() / 1000);
  const sig = createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
  const r = await fetch(BASE + '/in/shop-hooks', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'stripe-signature': `t=${t},v1=${sig}` },
    body,
  });
  const got = await r.json();
  assert.equal(r.status, 200, JSON.stringify(got));
  assert.equal(got.events[0].status, 'held');
  const key = got.events[0].key;

  const { page } = await newPage();
  await signIn(page, T.operator);
  await page.getByRole('link', { name: 'Sources', exact: true }).click();
  await page.getByRole('heading', { name: 'Sources' }).waitFor();
  await page.getByRole('link', { name: 'shop-hooks', exact: true }).click();
  await page.getByRole('heading', { name: 'Events' }).waitFor();
  await shot(page, 'source');
  await page.getByRole('link', { name: key }).click();
  await page.getByRole('heading', { name: key }).waitFor();
  await page.getByRole('heading', { name: 'Body', exact: true }).waitFor();
  await page.getByText('<img src=x onerror=alert(1)>').first().waitFor();
  assert.equal(await page.locator('main img').count(), 0, 'the body is text');
  const form = page.getByRole('form', { name: 'Redeliver', exact: true });
  await form.getByRole('button', { name: 'Redeliver', exact: true }).click();
  await page.getByRole('alert').filter({ hasText: 'note' }).waitFor();
  assert.equal(await state('shop', key), 'needs_review', 'nothing changed without a note');
  await form.getByLabel('Note').fill('Order checked by hand; forward it again.');
  await form.getByRole('button', { name: 'Redeliver', exact: true }).click();
  await page.getByRole('status').filter({ hasText: 'Done: redelivered' }).waitFor();
  await shot(page, 'source-event');
  const rec = await api('GET', keyPath('shop', key), undefined, T.operator);
  const resolved = rec.json.events.find((e) => e.type === 'resolved');
  assert.ok(resolved, rec.text);
  assert.equal(resolved.note, 'Order checked by hand; forward it again.');
});

/** A loopback destination that keeps every request (path and JSON body) and answers 201. */
async function countingSink() {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      let json = null;
      try { json = JSON.parse(body); } catch { /* not JSON */ }
      seen.push({ path: req.url, body: json });
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: `msg_${seen.length}` }));
    });
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { seen, port: server.address().port, close: () => server.close() };
}

/** `tools/call` over MCP's stateless revision (a plain HTTP POST): the CallToolResult. */
async function toolCall(ns, name, args) {
  const r = await fetch(`${BASE}/mcp/${ns}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${T.worker}`, 'content-type': 'application/json',
      accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: {
      name, arguments: args,
      _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } }),
  });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  return JSON.parse(text).result;
}

async function until(what, f, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await f()) return;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('an action draft awaiting approval shows its stored arguments; Approve delivers it once', async () => {
  const sink = await countingSink();
  try {
    const egress = await api('PATCH', '/v1/namespaces/agents',
      { egress: { allow: [`127.0.0.1:${sink.port}`] } });
    assert.equal(egress.status, 200, egress.text);
    const put = await api('PUT', '/v1/namespaces/agents/actions/send_followup', {
      title: 'Send the follow-up',
      description: 'Sends the follow-up e-mail of an order to its customer. Call it once per order; the result text is authoritative.',
      input_schema: {
        type: 'object',
        properties: { order_id: { type: 'string' }, to: { type: 'string' }, text: { type: 'string' } },
        required: ['order_id', 'to', 'text'],
      },
      key: '{order_id}:followup:v1',
      identity: ['order_id', 'to'],
      approval: 'required',
      deliver: { http: {
        method: 'POST',
        url: `http://127.0.0.1:${sink.port}/send/{{order_id}}`,
        headers: { Authorization: 'Bearer mail-provider-secret-4242' },
        body: { to: '{{to}}', text: '{{text}}' },
      } },
    });
    assert.equal(put.status, 201, put.text);

    const stored = { order_id: '847', to: 'ada@example.com',
      text: 'Hello Ada,\n\nyour order 847 shipped today <b>with tracking 1Z999</b>.\n\nBest, the shop' };
    const first = await toolCall('agents', 'send_followup', stored);
    assert.equal(first.structuredContent.outcome, 'awaiting_approval', JSON.stringify(first));
    assert.equal(first.isError, false);
    assert.equal(sink.seen.length, 0, 'nothing is sent before approval');

    const { page } = await newPage();
    await signIn(page, T.operator);
    // The namespace lists its actions; the actions page shows hints, never a header value.
    await page.goto(BASE + '/console/ns/agents');
    await page.getByRole('link', { name: 'All actions' }).click();
    await page.getByRole('heading', { name: 'Actions' }).waitFor();
    await page.getByRole('cell', { name: 'send_followup', exact: true }).waitFor();
    await page.getByText('{order_id}:followup:v1').waitFor();
    await page.getByText('Authorization: …4242').waitFor();
    assert.equal(await page.getByText('mail-provider-secret').count(), 0, 'no header value');
    await shot(page, 'actions');

    // The record of the call: the action named, the stored arguments in full, as text.
    await page.goto(recordUrl('agents', '847:followup:v1'));
    await page.getByRole('heading', { name: 'Draft to approve' }).waitFor();
    await page.getByRole('link', { name: 'send_followup' }).first().waitFor();
    const draft = page.locator('section[aria-labelledby=draft-h] pre.json');
    assert.deepEqual(JSON.parse(await draft.textContent()), stored, 'the stored arguments in full');
    assert.equal(await page.locator('main b').count(), 0, 'the arguments are text');
    await shot(page, 'record-action-approval');
    const form = page.getByRole('form', { name: 'Approve or reject' });
    await form.getByLabel('Note').fill('Wording checked.');
    await form.getByRole('button', { name: 'Approve' }).click();
    await page.getByRole('status').filter({ hasText: 'Done: approved' }).waitFor();

    // idem delivers the stored draft itself, through its outbox: one request, these arguments.
    await until('the delivery', () => sink.seen.length >= 1);
    await until('the record to complete', async () => (await state('agents', '847:followup:v1')) === 'completed');
    assert.equal(sink.seen.length, 1);
    assert.equal(sink.seen[0].path, '/send/847');
    assert.deepEqual(sink.seen[0].body, { to: stored.to, text: stored.text });

    // A regenerated draft (same identity, other text) is replayed; nothing new is sent.
    const again = await toolCall('agents', 'send_followup',
      { order_id: '847', to: 'ada@example.com', text: 'Hi Ada! A different wording.' });
    assert.equal(again.structuredContent.outcome, 'completed', JSON.stringify(again));
    assert.equal(again.structuredContent.replayed, true);
    await new Promise((ok) => setTimeout(ok, 500));
    assert.equal(sink.seen.length, 1, 'delivered exactly once');
  } finally {
    sink.close();
  }
});
