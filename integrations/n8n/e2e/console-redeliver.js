// What an operator's click on "Redeliver to NAME" in idem's console sends, over plain HTTP:
// sign in with an operator token (the login form's double-submit CSRF cookie), open the
// event's page, read the session's CSRF token from its per-destination form, and post that
// form. Prints {"login": status, "page": status, "redeliver": status, "location": "…"}.
//
//   node console-redeliver.js IDEM_URL OPERATOR_TOKEN SOURCE KEY DESTINATION NOTE
//
// Loopback only; the token is never printed.
'use strict';

const [base, token, source, key, destination, note] = process.argv.slice(2);
if (!note) {
	console.error('usage: console-redeliver.js IDEM_URL OPERATOR_TOKEN SOURCE KEY DESTINATION NOTE');
	process.exit(2);
}

const jar = new Map();
function keep(res) {
	for (const c of res.headers.getSetCookie()) {
		const [pair] = c.split(';');
		const i = pair.indexOf('=');
		jar.set(pair.slice(0, i), pair.slice(i + 1));
	}
}
function cookie() {
	return [...jar].filter(([, v]) => v !== '').map(([k, v]) => `${k}=${v}`).join('; ');
}
async function call(path, form) {
	const res = await fetch(base + path, {
		method: form ? 'POST' : 'GET',
		redirect: 'manual',
		headers: {
			cookie: cookie(),
			...(form ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
		},
		body: form ? new URLSearchParams(form).toString() : undefined,
		signal: AbortSignal.timeout(15000),
	});
	keep(res);
	return { status: res.status, location: res.headers.get('location'), text: await res.text() };
}
// The value of the hidden `csrf` field of the first form whose action ends with `suffix`.
function csrfOf(html, suffix) {
	for (const m of html.matchAll(/<form\b[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/g)) {
		if (!m[1].endsWith(suffix)) continue;
		const f = /name="csrf"[^>]*value="([^"]*)"|value="([^"]*)"[^>]*name="csrf"/.exec(m[2]);
		if (f) return f[1] || f[2];
	}
	return null;
}

(async () => {
	const out = {};
	const page0 = await call('/console/login');
	const loginCsrf = csrfOf(page0.text, '/console/login');
	const login = await call('/console/login', { csrf: loginCsrf || '', token, next: '/console' });
	out.login = login.status;
	const href = `/console/sources/${encodeURIComponent(source)}/events/${encodeURIComponent(key)}`;
	const page = await call(href);
	out.page = page.status;
	// The destination's row carries a hidden `destination` field; every form has the same csrf.
	const csrf = csrfOf(page.text, '/redeliver');
	out.destination_row = page.text.includes(`value="${destination}"`);
	const r = await call(`${href}/redeliver`, { csrf: csrf || '', destination, note });
	out.redeliver = r.status;
	out.location = r.location;
	console.log(JSON.stringify(out));
})().catch((e) => {
	console.log(JSON.stringify({ error: String(e && e.message) }));
	process.exit(1);
});
