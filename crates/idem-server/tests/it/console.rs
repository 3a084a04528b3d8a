//! The operator console through a real socket, without a browser: sign-in, sessions, CSRF,
//! scope, escaping and headers, and each decision seen afterwards through the API — on
//! SQLite and, when `IDEM_TEST_PG` is set, on PostgreSQL.

use idem::Role;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use idem_testkit::app::*;

/// A browser without a browser: one cookie jar for `idem_session`, no redirects followed.
struct Console {
    base: String,
    http: reqwest::Client,
    cookies: Vec<(String, String)>,
}

struct Page {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Page {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    /// The value of the hidden `csrf` field of the first form.
    fn csrf(&self) -> String {
        let at = self
            .text
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no csrf field in {}", self.text));
        let rest = &self.text[at + 19..];
        rest[..rest.find('"').expect("end")].to_owned()
    }
    /// The page contains `needle`.
    #[track_caller]
    fn assert_has(&self, needle: &str) {
        assert!(self.text.contains(needle), "{}", self.text);
    }
    /// The page contains every one of `needles`.
    #[track_caller]
    fn assert_has_all(&self, needles: &[&str]) {
        for needle in needles {
            assert!(self.text.contains(needle), "{needle}: {}", self.text);
        }
    }
    #[track_caller]
    fn assert_secure_headers(&self) {
        assert!(
            self.header("content-security-policy")
                .starts_with("default-src 'self'"),
            "{:?}",
            self.headers
        );
        assert_eq!(self.header("x-frame-options"), "DENY");
        assert_eq!(self.header("x-content-type-options"), "nosniff");
        assert_eq!(self.header("cache-control"), "no-store");
        assert!(self.header("content-type").starts_with("text/html"));
        assert!(!self.text.contains("<script"), "{}", self.text);
    }
}

impl Console {
    fn new(app: &TestApp) -> Console {
        Console {
            base: app.api.base.clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            cookies: vec![],
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = if self.cookies.is_empty() {
            req
        } else {
            req.header("cookie", self.cookie_header())
        };
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        for c in headers.get_all("set-cookie") {
            let c = c.to_str().expect("ascii");
            let (kv, _) = c.split_once(';').unwrap_or((c, ""));
            let (k, v) = kv.split_once('=').expect("cookie");
            self.cookies.retain(|(n, _)| n != k);
            if !v.is_empty() {
                self.cookies.push((k.to_owned(), v.to_owned()));
            }
        }
        let text = resp.text().await.expect("body");
        Page {
            status,
            headers,
            text,
        }
    }

    async fn get(&mut self, path: &str) -> Page {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let req = self.http.post(format!("{}{path}", self.base)).form(form);
        self.send(req).await
    }

    /// POSTs `body` as it is, as a urlencoded form.
    async fn post_raw(&mut self, path: &str, body: Vec<u8>) -> Page {
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send(req).await
    }

    /// Signs in with `token`; returns the answer to the sign-in POST.
    async fn sign_in(&mut self, token: &str) -> Page {
        let login = self.get("/console/login").await;
        assert_eq!(login.status, 200, "{}", login.text);
        let csrf = login.csrf();
        self.post_csrf(
            "/console/login",
            &csrf,
            &[("token", token), ("next", "/console")],
        )
        .await
    }

    /// A console signed in with `token`.
    async fn signed_in(app: &TestApp, token: &str) -> Console {
        let mut c = Console::new(app);
        assert_eq!(c.sign_in(token).await.status, 303);
        c
    }

    /// POSTs a form of its CSRF token and `fields`.
    async fn post_csrf(&mut self, path: &str, csrf: &str, fields: &[(&str, &str)]) -> Page {
        let mut form = vec![("csrf", csrf)];
        form.extend_from_slice(fields);
        self.post(path, &form).await
    }

    /// POSTs a form of its CSRF token and a `note`.
    async fn post_noted(&mut self, path: &str, csrf: &str, note: &str) -> Page {
        self.post_csrf(path, csrf, &[("note", note)]).await
    }

    /// The CSRF token of a signed-in page.
    async fn csrf(&mut self) -> String {
        let p = self.get("/console/review").await;
        assert_eq!(p.status, 200, "{}", p.text);
        p.csrf()
    }
}

/// The newest event of a record read through the API (null when there is none).
fn last_event(r: &Resp) -> Value {
    r.body["events"]
        .as_array()
        .and_then(|e| e.last())
        .cloned()
        .unwrap_or(Value::Null)
}

fn rec(ns: &str, key: &str) -> String {
    format!("/console/ns/{ns}/keys/{}", enc(key))
}

async fn to_review(app: &TestApp, api: &Api, ns: &str, key: &str, owner: &str) {
    let t = Api::acquired(&api.claim(ns, key, json!({"owner": owner})).await);
    let r = api
        .fail(
            ns,
            key,
            json!({"token": t, "kind": "ambiguous", "error": {"category": "timeout", "message": "gateway timed out"}}),
        )
        .await;
    assert_eq!(r.body["state"], "needs_review", "{}", r.text);
    app.advance(5);
}

/// Admin, operator, worker, operator of namespace "a" (in `tokens`, in that order).
async fn app_with_tokens(backend: Backend) -> TestApp {
    spawn_with(Options {
        backend,
        tokens: vec![
            (Role::Admin, "*"),
            (Role::Operator, "*"),
            (Role::Worker, "*"),
            (Role::Operator, "a"),
        ],
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn operator_and_admin_tokens_sign_in_worker_and_wrong_ones_get_the_sign_in_page() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        to_review(&app, &app.api, "secretns", "k1", "w").await;

        // No session: the sign-in page, never data.
        let mut c = Console::new(&app);
        let p = c.get("/console").await;
        assert_eq!(p.status, 401, "{backend:?}");
        assert!(p.text.contains(">Sign in<") && p.text.contains(">Token<"));
        assert!(!p.text.contains("secretns"), "{}", p.text);
        p.assert_secure_headers();
        let p = c.get(&rec("secretns", "k1")).await;
        assert_eq!(p.status, 401);
        assert!(!p.text.contains("gateway timed out"));

        for (secret, message) in [
            (
                app.tokens[2].as_str(),
                "worker token cannot open the console",
            ),
            ("idem_not_a_real_token", "Unknown token"),
            ("", "Enter a token"),
        ] {
            let mut c = Console::new(&app);
            let p = c.sign_in(secret).await;
            assert_eq!(p.status, 401, "{backend:?} {message}: {}", p.text);
            p.assert_has(message);
            assert!(!p.text.contains("secretns"));
            assert!(c.cookies.iter().all(|(k, _)| k != "idem_session"));
            assert_eq!(c.get("/console").await.status, 401);
        }

        for secret in [&app.tokens[0], &app.tokens[1]] {
            let mut c = Console::new(&app);
            let p = c.sign_in(secret).await;
            assert_eq!(p.status, 303, "{backend:?}: {}", p.text);
            assert_eq!(p.header("location"), "/console");
            let set = p
                .headers
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().expect("ascii").to_owned())
                .find(|v| v.starts_with("idem_session="))
                .expect("session cookie");
            for attr in [
                "HttpOnly",
                "SameSite=Strict",
                "Path=/console",
                "Max-Age=43200",
            ] {
                assert!(set.contains(attr), "{set}");
            }
            assert!(!set.contains("Secure"), "plain http: {set}");
            let value = &set["idem_session=".len()..set.find(';').expect(";")];
            assert_eq!(value.len(), 64, "{set}");
            assert!(!value.contains(secret.as_str()));
            let p = c.get("/console").await;
            assert_eq!(p.status, 200, "{}", p.text);
            p.assert_has("secretns");
            assert!(p.text.contains(">Sign out<"));
        }
    }
}

#[tokio::test]
async fn sign_out_needs_the_csrf_token_and_ends_the_session() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let csrf = c.csrf().await;
        let p = c.post("/console/logout", &[]).await;
        assert_eq!(p.status, 403, "{backend:?}");
        p.assert_secure_headers();
        assert_eq!(c.get("/console").await.status, 200, "still signed in");
        let p = c.post("/console/logout", &[("csrf", &csrf)]).await;
        assert_eq!(p.status, 303);
        assert_eq!(p.header("location"), "/console/login");
        assert_eq!(c.get("/console").await.status, 401);
        // The old cookie value is dead on the server too, not just forgotten by the client.
        let p = c.post("/console/login", &[("token", &app.tokens[1])]).await;
        assert_eq!(p.status, 403, "sign-in without its form token");
    }
}

#[tokio::test]
async fn a_session_past_its_life_gets_the_sign_in_page_with_a_message() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        assert_eq!(c.get("/console/review").await.status, 200);
        app.advance(12 * 3_600_000 + 1);
        let p = c.get("/console/review").await;
        assert_eq!(p.status, 401, "{backend:?}: {}", p.text);
        p.assert_secure_headers();
        assert!(p.text.contains("Your session has ended"), "{}", p.text);
        assert!(!p.text.contains("evt_"), "never data");
        // Without a cookie at all: the sign-in page, no message about a session.
        let mut fresh = Console::new(&app);
        let p = fresh.get("/console/review").await;
        assert_eq!(p.status, 401);
        assert!(!p.text.contains("Your session"), "{}", p.text);
    }
}

#[tokio::test]
async fn a_post_without_the_csrf_token_is_refused_and_changes_nothing() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let api = app.as_token(Some(&app.tokens[1]));
        to_review(&app, &api, "pay", "evt_1:charge", "w1").await;
        let before = api.record("pay", "evt_1:charge").await.body;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let path = format!("{}/resolve", rec("pay", "evt_1:charge"));
        let form = [("action", "completed"), ("note", "paid, checked in Stripe")];
        let p = c.post(&path, &form).await;
        assert_eq!(p.status, 403, "{backend:?}: {}", p.text);
        p.assert_secure_headers();
        let wrong = [
            ("csrf", "0000"),
            ("action", "completed"),
            ("note", "paid, checked in Stripe"),
        ];
        assert_eq!(c.post(&path, &wrong).await.status, 403);
        let p = c.post("/console/ns/pay/pause", &[("note", "stop")]).await;
        assert_eq!(p.status, 403);
        assert_eq!(api.record("pay", "evt_1:charge").await.body, before);
        assert_eq!(api.namespace("pay").await.body["paused"], false);
    }
}

#[tokio::test]
async fn a_form_that_is_not_utf8_is_refused_and_changes_nothing() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let api = app.as_token(Some(&app.tokens[1]));
        to_review(&app, &api, "pay", "evt_8:charge", "w1").await;
        let before = api.record("pay", "evt_8:charge").await.body;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let csrf = c.csrf().await;
        let path = format!("{}/resolve", rec("pay", "evt_8:charge"));
        // A percent-escape of bytes that are not UTF-8, and such a byte sent as it is.
        for tail in [&b"&note=%FF%FE"[..], b"&note=paid \xff"] {
            let mut body = format!("csrf={csrf}&action=completed").into_bytes();
            body.extend_from_slice(tail);
            let p = c.post_raw(&path, body).await;
            assert_eq!(p.status, 400, "{backend:?}: {}", p.text);
            p.assert_secure_headers();
            p.assert_has("not valid UTF-8");
            assert_eq!(api.record("pay", "evt_8:charge").await.body, before);
        }
        // The same form in UTF-8 is taken.
        let body = format!("csrf={csrf}&action=completed&note=paid+%E2%9C%93").into_bytes();
        assert_eq!(c.post_raw(&path, body).await.status, 303);
        let after = api.record("pay", "evt_8:charge").await;
        assert_eq!(
            last_event(&after)["note"],
            "paid \u{2713}",
            "{}",
            after.text
        );
    }
}

#[tokio::test]
async fn a_form_over_the_body_limit_gets_the_console_error_page_with_its_headers() {
    let app = spawn_with(Options {
        tokens: vec![(Role::Operator, "*")],
        body_limit: 4096,
        ..Default::default()
    })
    .await;
    let api = app.as_token(Some(&app.tokens[0]));
    to_review(&app, &api, "pay", "evt_9:charge", "w1").await;
    let before = api.record("pay", "evt_9:charge").await.body;
    let mut c = Console::signed_in(&app, &app.tokens[0]).await;
    let csrf = c.csrf().await;
    let path = format!("{}/resolve", rec("pay", "evt_9:charge"));
    let note = "n".repeat(8192);
    let form = [("action", "completed"), ("note", note.as_str())];
    let p = c.post_csrf(&path, &csrf, &form).await;
    assert_eq!(p.status, 413, "{}", p.text);
    p.assert_secure_headers();
    assert_eq!(p.header("referrer-policy"), "same-origin");
    p.assert_has("413 Payload Too Large");
    assert_eq!(api.record("pay", "evt_9:charge").await.body, before);
    // The API's refusal stays problem+json.
    let r = api
        .claim("pay", "big", json!({"payload": "x".repeat(8192)}))
        .await;
    r.problem(413, "body_too_large");
    assert!(r.headers.get("content-security-policy").is_none());
}

#[tokio::test]
async fn resolve_with_a_note_is_seen_through_the_api_and_without_one_is_refused() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let api = app.as_token(Some(&app.tokens[1]));
        to_review(&app, &api, "pay", "evt_2:charge", "w1").await;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let page = c.get(&rec("pay", "evt_2:charge")).await;
        assert_eq!(page.status, 200, "{}", page.text);
        page.assert_has_all(&[
            "<h1 class=\"key\">evt_2:charge</h1>",
            "<dt>State</dt><dd><span class=\"state state-needs_review\">needs_review</span>",
            "<dt>Attempt</dt><dd>1</dd>",
            ">Resolve</button>",
            ">Action</label>",
            ">External ref</label>",
            ">Result (JSON)</label>",
            ">Note (required)</label>",
            ">History</h2>",
            ">acquired</td>",
            ">failed</td>",
        ]);
        let csrf = page.csrf();
        let path = format!("{}/resolve", rec("pay", "evt_2:charge"));
        let before = api.record("pay", "evt_2:charge").await.body;

        // Without a note: the API's message on the record page, nothing changed.
        let p = c
            .post_csrf(&path, &csrf, &[("action", "completed"), ("note", "")])
            .await;
        assert_eq!(p.status, 422, "{backend:?}: {}", p.text);
        p.assert_has("Refused: ");
        p.assert_has("`note`");
        assert!(p.text.contains("<h1 class=\"key\">evt_2:charge</h1>"));
        assert_eq!(api.record("pay", "evt_2:charge").await.body, before);
        // Invalid JSON in the result: refused the same way.
        let bad_json = [
            ("action", "completed"),
            ("result", "{not json"),
            ("note", "checked"),
        ];
        let p = c.post_csrf(&path, &csrf, &bad_json).await;
        assert_eq!(p.status, 422, "{}", p.text);
        p.assert_has("not valid JSON");
        assert_eq!(api.record("pay", "evt_2:charge").await.body, before);

        let resolved = [
            ("action", "completed"),
            ("external_ref", "ch_42"),
            ("result", "{\"charge\": \"ch_42\"}"),
            ("note", "charged once, seen in Stripe"),
        ];
        let p = c.post_csrf(&path, &csrf, &resolved).await;
        assert_eq!(p.status, 303, "{}", p.text);
        let after = api.record("pay", "evt_2:charge").await;
        assert_eq!(after.body["record"]["state"], "completed", "{}", after.text);
        assert_eq!(after.body["record"]["external_ref"], "ch_42");
        assert_eq!(after.body["record"]["result"], json!({"charge": "ch_42"}));
        let last = last_event(&after);
        assert_eq!(last["type"], "resolved");
        assert_eq!(last["note"], "charged once, seen in Stripe");
        assert_eq!(last["actor"], "operator-*");
        // Resolving again: wrong state by now, the API's message, nothing changed.
        let p = c
            .post_csrf(&path, &csrf, &[("action", "retry"), ("note", "again")])
            .await;
        assert_eq!(p.status, 409, "{}", p.text);
        assert!(p.text.contains("Refused: "));
        assert_eq!(api.record("pay", "evt_2:charge").await.body, after.body);
    }
}

#[tokio::test]
async fn a_draft_is_shown_in_full_and_approved() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let api = app.as_token(Some(&app.tokens[1]));
        let t = Api::acquired(&api.claim("mail", "order-847:draft", json!({})).await);
        let long = "x".repeat(6000);
        let r = api
            .prepare(
                "mail",
                "order-847:draft",
                json!({"token": t, "payload": {"subject": "Your order", "body": long}, "approval_required": true}),
            )
            .await;
        assert_eq!(r.body["state"], "awaiting_approval", "{}", r.text);
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let page = c.get(&rec("mail", "order-847:draft")).await;
        assert_eq!(page.status, 200);
        assert!(page.text.contains("Draft to approve"));
        assert!(page.text.contains(&long), "the draft in full");
        assert!(!page.text.contains("<details>"), "the draft is not folded");
        assert!(page.text.contains(">Approve</button>") && page.text.contains(">Reject</button>"));
        assert!(!page.text.contains(">Resolve</button>"));
        let csrf = page.csrf();
        let path = format!("{}/approve", rec("mail", "order-847:draft"));
        let p = c.post_noted(&path, &csrf, "wording is fine").await;
        assert_eq!(p.status, 303, "{backend:?}: {}", p.text);
        let after = api.record("mail", "order-847:draft").await;
        assert_eq!(after.body["record"]["state"], "prepared", "{}", after.text);
        let last = last_event(&after);
        assert_eq!(last["type"], "approved");
        assert_eq!(last["note"], "wording is fine");
        // The redirect target says so.
        let shown = c.get(p.header("location")).await;
        shown.assert_has("Done: approved");
        // A long result elsewhere is folded behind a script-free "show all".
        shown.assert_has("<details><summary>show all");
    }
}

#[tokio::test]
async fn pause_asks_to_confirm_then_claims_get_503() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let api = app.as_token(Some(&app.tokens[1]));
        Api::acquired(&api.claim("ops", "k0", json!({})).await);
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let ns = c.get("/console/ns/ops").await;
        assert_eq!(ns.status, 200);
        ns.assert_has(">Pause</button>");
        assert!(ns.text.contains(">Policy</h2>") && ns.text.contains("stuck_after_ms"));
        // The first step only asks.
        let confirm = c.get("/console/ns/ops/pause").await;
        assert_eq!(confirm.status, 200);
        assert!(confirm.text.contains(">Confirm</button>"));
        confirm.assert_secure_headers();
        assert_eq!(api.namespace("ops").await.body["paused"], false);
        let p = c
            .post(
                "/console/ns/ops/pause",
                &[("csrf", &confirm.csrf()), ("note", "incident 12")],
            )
            .await;
        assert_eq!(p.status, 303, "{backend:?}: {}", p.text);
        assert_eq!(api.namespace("ops").await.body["paused"], true);
        let claim = api.claim("ops", "k1", json!({})).await;
        assert_eq!(claim.status, 503, "{}", claim.text);
        assert_eq!(claim.body["outcome"], "paused");
        let ns = c.get("/console/ns/ops").await;
        ns.assert_has(">Resume</button>");
        let confirm = c.get("/console/ns/ops/resume").await;
        let p = c
            .post("/console/ns/ops/resume", &[("csrf", &confirm.csrf())])
            .await;
        assert_eq!(p.status, 303);
        assert_eq!(api.claim("ops", "k1", json!({})).await.status, 201);
    }
}

#[tokio::test]
async fn a_scoped_session_neither_lists_nor_reaches_another_namespace() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let api = app.as_token(Some(&app.tokens[1]));
        to_review(&app, &api, "a", "mine", "w").await;
        to_review(&app, &api, "b", "theirs", "w").await;
        let mut c = Console::signed_in(&app, &app.tokens[3]).await;
        let overview = c.get("/console").await;
        overview.assert_has("/console/ns/a\"");
        assert!(
            !overview.text.contains("/console/ns/b\""),
            "{}",
            overview.text
        );
        let queue = c.get("/console/review").await;
        queue.assert_has(">mine</a>");
        assert!(!queue.text.contains("theirs"), "{}", queue.text);
        for path in [
            "/console/ns/b".to_owned(),
            rec("b", "theirs"),
            "/console/review?namespace=b".to_owned(),
            "/console/ns/b/pause".to_owned(),
            "/console/ns/b/actions".to_owned(),
        ] {
            let p = c.get(&path).await;
            assert_eq!(p.status, 403, "{backend:?} {path}: {}", p.text);
            assert!(!p.text.contains("theirs"));
            p.assert_secure_headers();
        }
        let csrf = c.csrf().await;
        let p = c
            .post(
                &format!("{}/resolve", rec("b", "theirs")),
                &[("csrf", &csrf), ("action", "completed"), ("note", "x")],
            )
            .await;
        assert_eq!(p.status, 403);
        assert_eq!(
            api.record("b", "theirs").await.body["record"]["state"],
            "needs_review"
        );
        // The same scope through the API.
        let scoped = app.as_token(Some(&app.tokens[3]));
        let r = scoped.get("/v1/review").await;
        assert_eq!(r.status, 200);
        let keys: Vec<&str> = r.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| i["key"].as_str())
            .collect();
        assert_eq!(keys, ["mine"]);
        scoped
            .get("/v1/review?namespace=b")
            .await
            .problem(403, "forbidden");
        let r = scoped.get("/v1/namespaces").await;
        assert_eq!(
            r.body["items"].as_array().map(Vec::len),
            Some(1),
            "{}",
            r.text
        );
        assert_eq!(r.body["items"][0]["namespace"], "a");
    }
}

#[tokio::test]
async fn keys_owners_and_notes_from_clients_render_as_text() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let key = "<script>alert(1)</script>";
        let owner = "<img src=x onerror=alert(1)>";
        to_review(&app, &app.api, "xss", key, owner).await;
        let mut c = Console::new(&app);
        let page = c.get(&rec("xss", key)).await;
        assert_eq!(page.status, 200, "{}", page.text);
        let csrf = page.csrf();
        let p = c
            .post(
                &format!("{}/resolve", rec("xss", key)),
                &[
                    ("csrf", &csrf),
                    ("action", "failed_permanent"),
                    ("note", "\"><script>alert(2)</script><b onerror=alert(3)>"),
                ],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.text);
        for path in [
            "/console/review".to_owned(),
            rec("xss", key),
            "/console/ns/xss".into(),
        ] {
            let p = c.get(&path).await;
            assert_eq!(p.status, 200);
            p.assert_secure_headers(); // no `<script` anywhere
            assert!(!p.text.contains("<img"), "{path}: {}", p.text);
            assert!(!p.text.contains("<b onerror"), "{path}");
        }
        let page = c.get(&rec("xss", key)).await;
        assert!(page.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.text.contains("&lt;img src=x onerror=alert(1)&gt;"));
        page.assert_has("&quot;&gt;&lt;script&gt;alert(2)");
    }
}

#[tokio::test]
async fn every_console_answer_carries_the_security_headers() {
    let app = app_with_tokens(Backend::Sqlite).await;
    let mut c = Console::new(&app);
    for path in [
        "/console",
        "/console/login",
        "/console/nope",
        "/console/review",
    ] {
        c.get(path).await.assert_secure_headers();
    }
    assert_eq!(c.sign_in(&app.tokens[0]).await.status, 303);
    to_review(&app, &app.api, "h", "k", "o").await;
    for (path, status) in [
        ("/console".to_owned(), 200),
        ("/console/review".into(), 200),
        ("/console/ns/h".into(), 200),
        (rec("h", "k"), 200),
        (rec("h", "unknown"), 404),
        ("/console/no/such/page".into(), 404),
        ("/console/ns/bad%20ns".into(), 400),
    ] {
        let p = c.get(&path).await;
        assert_eq!(p.status, status, "{path}: {}", p.text);
        p.assert_secure_headers();
    }
    let css = c.get("/console/assets/console.css").await;
    assert_eq!(css.status, 200);
    assert!(css.header("content-type").starts_with("text/css"));
    assert_eq!(css.header("x-frame-options"), "DENY");
}

#[tokio::test]
async fn an_open_server_opens_the_console_and_a_revoked_token_ends_its_session() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        let mut c = Console::new(&app);
        let p = c.get("/console").await;
        assert_eq!(p.status, 200, "no tokens: open, like the API");
        assert!(!p.text.contains(">Sign out<"));
        // Without tokens nobody is named: an operator's decision is not credited to the
        // worker that owned the record (its claim is).
        let api = app.as_token(None);
        to_review(&app, &api, "pay", "evt_9:charge", "worker-7").await;
        let r = api
            .resolve(
                "pay",
                "evt_9:charge",
                json!({"action": "completed", "note": "checked"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let page = c.get(&rec("pay", "evt_9:charge")).await;
        assert_eq!(page.status, 200, "{}", page.text);
        let row = |kind: &str| {
            page.text
                .split("<tr>")
                .find(|r| r.contains(&format!(">{kind}<")))
                .unwrap_or_default()
                .to_owned()
        };
        assert!(row("acquired").contains("worker-7"), "{}", row("acquired"));
        let resolved = row("resolved");
        assert!(!resolved.is_empty(), "{}", page.text);
        assert!(!resolved.contains("worker-7"), "{resolved}");
        assert!(!row("moved_to_review").contains("worker-7"));

        let app = app_with_tokens(backend).await;
        let admin = app.as_token(Some(&app.tokens[0]));
        let created = admin
            .post("/v1/tokens", json!({"role": "operator", "namespace": "*"}))
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let mut c = Console::signed_in(&app, &created.token()).await;
        assert_eq!(c.get("/console").await.status, 200);
        let id = created.body["token_id"].as_i64().expect("id");
        let r = admin
            .send(admin.http.delete(format!("{}/v1/tokens/{id}", admin.base)))
            .await;
        assert_eq!(r.status, 204, "{}", r.text);
        let p = c.get("/console").await;
        assert_eq!(p.status, 401, "{backend:?}");
        p.assert_has("revoked");
    }
}

#[tokio::test]
async fn the_review_queue_is_oldest_first_across_namespaces_and_filters() {
    for backend in backends() {
        let app = spawn_on(backend).await;
        to_review(&app, &app.api, "n2", "first", "alice").await;
        to_review(&app, &app.api, "n1", "second", "bob").await;
        let t = Api::acquired(
            &app.claim("n1", "draft", json!({"correlation_id": "corr-9"}))
                .await,
        );
        app.prepare(
            "n1",
            "draft",
            json!({"token": t, "payload": {"x": 1}, "approval_required": true}),
        )
        .await;
        app.advance(5);
        // Processing, but not stuck yet; then a stuck one.
        Api::acquired(
            &app.claim("n3", "stuck", json!({"lease_ms": 3_600_000}))
                .await,
        );
        app.advance(16 * 60_000);
        Api::acquired(&app.claim("n3", "fresh", json!({})).await);
        let keys = |r: &Resp| -> Vec<String> {
            r.body["items"]
                .as_array()
                .unwrap_or_else(|| panic!("{}", r.text))
                .iter()
                .filter_map(|i| i["key"].as_str().map(str::to_owned))
                .collect()
        };
        let all = app.get("/v1/review").await;
        assert_eq!(all.status, 200, "{}", all.text);
        assert_eq!(
            keys(&all),
            ["first", "second", "draft", "stuck"],
            "{backend:?}"
        );
        assert_eq!(
            keys(&app.get("/v1/review?namespace=n1").await),
            ["second", "draft"]
        );
        assert_eq!(
            keys(&app.get("/v1/review?state=awaiting_approval").await),
            ["draft"]
        );
        assert_eq!(
            keys(&app.get("/v1/review?state=processing").await),
            ["stuck"]
        );
        assert_eq!(keys(&app.get("/v1/review?owner=bob").await), ["second"]);
        assert_eq!(
            keys(&app.get("/v1/review?correlation_id=corr-9").await),
            ["draft"]
        );
        app.get("/v1/review?state=completed")
            .await
            .problem(422, "invalid_field");
        app.get("/v1/review?cursor=zz")
            .await
            .problem(422, "invalid_field");
        // Keyset pages.
        let mut seen = vec![];
        let mut q = "limit=1".to_owned();
        loop {
            let page = app.get(&format!("/v1/review?{q}")).await;
            seen.extend(keys(&page));
            match page.body["next_cursor"].as_str() {
                Some(c) => q = format!("limit=1&cursor={c}"),
                None => break,
            }
        }
        assert_eq!(seen, ["first", "second", "draft", "stuck"]);
        // Key lists filter by owner and correlation id.
        assert_eq!(keys(&app.list("n1", "owner=bob").await), ["second"]);
        assert_eq!(
            keys(&app.list("n1", "correlation_id=corr-9").await),
            ["draft"]
        );
        assert_eq!(
            keys(&app.list("n1", "owner=nobody").await),
            Vec::<String>::new()
        );
        // The namespaces list.
        let ns = app.get("/v1/namespaces").await;
        let names: Vec<&str> = ns.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| i["namespace"].as_str())
            .collect();
        assert_eq!(names, ["n1", "n2", "n3"]);
        assert_eq!(ns.body["items"][0]["counts"]["awaiting_approval"], 1);
        assert_eq!(ns.body["items"][0]["paused"], false);
    }
}

// ------------------------------------------------------------------ intake sources

const STRIPE_SECRET: &str = "whsec_console_source_secret_9";

/// A Stripe source forwarding to `url`, in namespace `ns`.
fn stripe_doc(ns: &str, url: &str, timeout_ms: u64) -> Value {
    json!({
        "provider": "stripe", "namespace": ns, "secrets": [STRIPE_SECRET],
        "forward": {"url": url, "timeout_ms": timeout_ms, "retry": {"base_ms": 1, "max_ms": 1}},
    })
}

/// A real signed `POST /in/{source}` (Stripe's scheme, signed here with HMAC directly);
/// returns the key of its one event.
async fn post_signed(app: &TestApp, source: &str, body: &[u8]) -> String {
    post_signed_with(app, source, body, &[]).await
}

/// [`post_signed`] with `extra` request headers besides the signature.
async fn post_signed_with(
    app: &TestApp,
    source: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> String {
    use hmac::{Hmac, Mac};
    let t = app.now().0 / 1000;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(STRIPE_SECRET.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let sig = format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()));
    let mut req = app
        .http
        .post(format!("{}/in/{source}", app.base))
        .header("content-type", "application/json")
        .header("stripe-signature", sig)
        .body(body.to_vec());
    for (name, value) in extra {
        req = req.header(*name, *value);
    }
    let r = app.as_token(None).send(req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["events"][0]["key"].as_str().expect("key").to_owned()
}

#[tokio::test]
async fn credentials_in_a_forward_or_alert_url_are_not_shown() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let admin = app.as_token(Some(&app.tokens[0]));
        let doc = stripe_doc("pay", "http://127.0.0.1:9/x?apikey=q-s3cr3t", 1000);
        let r = admin
            .send(
                admin
                    .http
                    .put(format!("{}/v1/sources/creds", admin.base))
                    .json(&doc),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = admin
            .patch_namespace(
                "pay",
                // User info is refused in an alert URL; a query may still carry a credential.
                json!({"alert_url": "https://alerts.example.com/hook?k=k-s3cr3t#a-s3cr3t"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let source = c.get("/console/sources/creds").await;
        assert_eq!(source.status, 200, "{}", source.text);
        source.assert_has("http://127.0.0.1:9/x");
        let ns = c.get("/console/ns/pay").await;
        assert_eq!(ns.status, 200, "{}", ns.text);
        ns.assert_has("https://alerts.example.com/hook");
        for page in [&source, &ns] {
            assert!(!page.text.contains("s3cr3t"), "{}", page.text);
        }
    }
}

fn event_page(source: &str, key: &str) -> String {
    format!("/console/sources/{source}/events/{}", enc(key))
}

/// Admin creates source "pay" (namespace pay) and "mine" (namespace a); one held event in
/// each (no id → `needs_review` at once, nothing forwarded). Returns the two keys.
async fn two_sources(app: &TestApp) -> (String, String) {
    let admin = app.as_token(Some(&app.tokens[0]));
    for (name, ns) in [("pay", "pay"), ("mine", "a")] {
        let r = admin
            .send(
                admin
                    .http
                    .put(format!("{}/v1/sources/{name}", admin.base))
                    .json(&stripe_doc(ns, "http://127.0.0.1:9/x", 1000)),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let pay = post_signed(
        app,
        "pay",
        br#"{"type":"<script>alert(1)</script>","note":"<img src=x onerror=alert(2)>"}"#,
    )
    .await;
    let mine = post_signed(app, "mine", br#"{"type":"mine.created"}"#).await;
    for (ns, key) in [("pay", &pay), ("a", &mine)] {
        assert_eq!(
            admin.record(ns, key).await.body["record"]["state"],
            "needs_review"
        );
    }
    (pay, mine)
}

/// A server with [`two_sources`] (the event keys of `pay` and of `mine`), the operator's
/// API and the record of `pay`'s event before the test does anything.
async fn with_sources(backend: Backend) -> (TestApp, String, String, Api, Value) {
    let app = app_with_tokens(backend).await;
    let (key, mine) = two_sources(&app).await;
    let api = app.as_token(Some(&app.tokens[1]));
    let before = api.record("pay", &key).await.body;
    (app, key, mine, api, before)
}

#[tokio::test]
async fn sources_are_listed_and_an_event_shows_its_body_as_text() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let (key, _) = two_sources(&app).await;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;

        let p = c.get("/console/sources").await;
        assert_eq!(p.status, 200, "{backend:?}: {}", p.text);
        p.assert_secure_headers();
        for want in [
            "<h1>Sources</h1>",
            "href=\"/console/sources/pay\"",
            "href=\"/console/sources/mine\"",
            ">stripe</td>",
            ">Sources</a>",
        ] {
            assert!(p.text.contains(want), "{want}: {}", p.text);
        }
        let overview = c.get("/console").await;
        overview.assert_has("href=\"/console/sources/pay\"");
        // Each source has one held event: backlog 1, dead letters 1, on both pages.
        for page in [&p, &overview] {
            page.assert_has(">Dead letters</th>");
            let row = page
                .text
                .split("<tr>")
                .find(|r| r.contains("href=\"/console/sources/pay\""))
                .expect("the pay row");
            assert_eq!(row.matches("<td class=\"num\">1</td>").count(), 2, "{row}");
        }

        let p = c.get("/console/sources/pay").await;
        assert_eq!(p.status, 200, "{}", p.text);
        p.assert_secure_headers();
        for want in [
            "<h1>pay</h1>".to_owned(),
            ">Events</h2>".to_owned(),
            format!("href=\"{}\"", event_page("pay", &key)),
            "hints: …et_9".to_owned(),
            ">Redeliver dead letters</button>".to_owned(),
        ] {
            assert!(p.text.contains(&want), "{want}: {}", p.text);
        }
        assert!(!p.text.contains(STRIPE_SECRET), "no secret: {}", p.text);
        // The state filter: nothing is completed yet.
        let p = c.get("/console/sources/pay?state=completed").await;
        assert_eq!(p.status, 200);
        assert!(!p.text.contains(&event_page("pay", &key)), "{}", p.text);
        assert!(p.text.contains("Nothing here."));
        let p = c.get("/console/sources/pay?state=nope").await;
        assert_eq!(p.status, 422, "{}", p.text);

        let p = c.get(&event_page("pay", &key)).await;
        assert_eq!(p.status, 200, "{}", p.text);
        p.assert_secure_headers();
        for want in [
            format!("<h1 class=\"key\">{key}</h1>"),
            "<dt>State</dt><dd><span class=\"state state-needs_review\">needs_review</span>"
                .to_owned(),
            ">Body</h2>".to_owned(),
            ">Headers</h2>".to_owned(),
            ">Attempts</h2>".to_owned(),
            "&lt;script&gt;alert(1)&lt;/script&gt;".to_owned(),
            "&lt;img src=x onerror=alert(2)&gt;".to_owned(),
            "application/json".to_owned(),
            format!("href=\"{}\"", rec("pay", &key)),
            ">Note (required)</label>".to_owned(),
            ">Redeliver</button>".to_owned(),
        ] {
            assert!(p.text.contains(&want), "{want}: {}", p.text);
        }
        assert!(!p.text.contains("<img"), "{}", p.text);
        assert_eq!(c.get(&event_page("pay", "nope")).await.status, 404);
        assert_eq!(c.get("/console/sources/nope").await.status, 404);
    }
}

#[tokio::test]
async fn forwarded_credentials_are_shown_as_hints_on_the_event_page() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let admin = app.as_token(Some(&app.tokens[0]));
        let mut doc = stripe_doc("pay", "http://127.0.0.1:9/x", 1000);
        doc["forward"]["headers"] = json!([
            "Authorization",
            "X-GitHub-Event",
            "Cookie",
            "X-Api-Key",
            "X-Short-Token",
        ]);
        let r = admin
            .send(
                admin
                    .http
                    .put(format!("{}/v1/sources/fwd", admin.base))
                    .json(&doc),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        // No id: held, nothing is forwarded.
        let key = post_signed_with(
            &app,
            "fwd",
            br#"{"type":"push"}"#,
            &[
                ("authorization", "Bearer SECRET-bearer-3456"),
                ("x-github-event", "push-event-shown"),
                ("cookie", "sid=SECRET-cookie-7890"),
                ("x-api-key", "SECRET-apikey-4321"),
                ("x-short-token", "SHORT1"),
            ],
        )
        .await;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let p = c.get(&event_page("fwd", &key)).await;
        assert_eq!(p.status, 200, "{backend:?}: {}", p.text);
        assert!(!p.text.contains("SECRET-"), "{}", p.text);
        assert!(!p.text.contains("SHORT1"), "{}", p.text);
        let row = |name: &str, value: &str| {
            format!("<td class=\"mono\">{name}</td><td class=\"mono\">{value}</td>")
        };
        p.assert_has_all(&[
            &row("authorization", "…3456"),
            &row("cookie", "…7890"),
            &row("x-api-key", "…4321"),
            &row("x-short-token", "(set)"),
            &row("x-github-event", "push-event-shown"),
        ]);
        // The API answers the stored values whole to the operator who may read the event
        // (what was received and is forwarded, as the body is).
        let api = app.as_token(Some(&app.tokens[1]));
        let r = api
            .send(
                api.http
                    .get(format!("{}/v1/sources/fwd/events/{}", api.base, enc(&key))),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body["event"]["headers"]["authorization"],
            "Bearer SECRET-bearer-3456"
        );
    }
}

#[tokio::test]
async fn redeliver_needs_a_note_and_the_csrf_token_and_is_seen_through_the_api() {
    for backend in backends() {
        let (app, key, _, api, before) = with_sources(backend).await;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let page = c.get(&event_page("pay", &key)).await;
        let csrf = page.csrf();
        let path = format!("{}/redeliver", event_page("pay", &key));

        // Without the CSRF token, with a wrong one: 403, nothing changed.
        let p = c.post(&path, &[("note", "receiver fixed")]).await;
        assert_eq!(p.status, 403, "{backend:?}: {}", p.text);
        p.assert_secure_headers();
        let p = c
            .post(&path, &[("csrf", "0000"), ("note", "receiver fixed")])
            .await;
        assert_eq!(p.status, 403);
        // Without a note: the API's message on the event page, nothing changed.
        let p = c.post_noted(&path, &csrf, "").await;
        assert_eq!(p.status, 422, "{}", p.text);
        p.assert_has("Refused: ");
        p.assert_has("`note`");
        assert!(p.text.contains(&format!("<h1 class=\"key\">{key}</h1>")));
        let p = c.post(&path, &[("csrf", &csrf)]).await;
        assert_eq!(p.status, 422, "{}", p.text);
        // A worker cannot hold a session, so cannot redeliver either.
        let mut w = Console::new(&app);
        assert_eq!(w.sign_in(&app.tokens[2]).await.status, 401);
        let p = w.post_noted(&path, &csrf, "x").await;
        assert!(p.status == 401 || p.status == 403, "{}", p.status);
        assert_eq!(api.record("pay", &key).await.body, before);

        // With a note: scheduled again, recorded with who and why.
        let p = c.post_noted(&path, &csrf, "checked by hand").await;
        assert_eq!(p.status, 303, "{}", p.text);
        let to = p.header("location").to_owned();
        assert_eq!(to, format!("{}?done=redelivered", event_page("pay", &key)));
        let r = api.record("pay", &key).await;
        let events = r.body["events"].as_array().expect("events");
        let resolved = events
            .iter()
            .find(|e| e["type"] == "resolved")
            .unwrap_or_else(|| panic!("a resolved event: {}", r.text));
        assert_eq!(resolved["note"], "checked by hand");
        assert_eq!(resolved["to_state"], "prepared", "{}", r.text);
        let p = c.get(&to).await;
        assert_eq!(p.status, 200);
        p.assert_has("Done: redelivered.");
    }
}

#[tokio::test]
async fn redeliver_is_refused_while_a_delivery_is_in_flight() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        // A receiver that accepts and never answers: the delivery stays in flight.
        let hang = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", hang.local_addr().expect("addr"));
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = accepted.clone();
        let holder = tokio::spawn(async move {
            let mut held = vec![];
            while let Ok((s, _)) = hang.accept().await {
                held.push(s);
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let admin = app.as_token(Some(&app.tokens[0]));
        let r = admin
            .send(
                admin
                    .http
                    .put(format!("{}/v1/sources/slow", admin.base))
                    .json(&stripe_doc("slow", &url, 20_000)),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let key = post_signed(&app, "slow", br#"{"id":"evt_slow","type":"x"}"#).await;
        let api = app.as_token(Some(&app.tokens[1]));
        let in_flight = eventually(std::time::Duration::from_secs(10), || async {
            accepted.load(std::sync::atomic::Ordering::SeqCst) > 0
        })
        .await;
        assert!(in_flight, "{backend:?}");
        let before = api.record("slow", &key).await.body;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let csrf = c.get(&event_page("slow", &key)).await.csrf();
        let p = c
            .post(
                &format!("{}/redeliver", event_page("slow", &key)),
                &[("csrf", &csrf), ("note", "again")],
            )
            .await;
        assert_eq!(p.status, 409, "{}", p.text);
        p.assert_has("Refused: ");
        p.assert_has("in flight");
        assert_eq!(api.record("slow", &key).await.body, before);
        holder.abort();
    }
}

#[tokio::test]
async fn redeliver_dead_letters_schedules_every_one_with_a_note() {
    for backend in backends() {
        let (app, key, _, api, before) = with_sources(backend).await;
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let csrf = c.get("/console/sources/pay").await.csrf();
        let p = c
            .post_noted("/console/sources/pay/redeliver", &csrf, "")
            .await;
        assert_eq!(p.status, 422, "{backend:?}: {}", p.text);
        p.assert_has("Refused: ");
        let p = c
            .post("/console/sources/pay/redeliver", &[("note", "all")])
            .await;
        assert_eq!(p.status, 403);
        assert_eq!(api.record("pay", &key).await.body, before);
        let p = c
            .post_noted("/console/sources/pay/redeliver", &csrf, "all of them")
            .await;
        assert_eq!(p.status, 303, "{}", p.text);
        assert_eq!(p.header("location"), "/console/sources/pay?scheduled=1");
        let types = api.event_types("pay", &key).await;
        assert!(types.contains(&"resolved".to_owned()), "{types:?}");
        let p = c.get("/console/sources/pay?scheduled=1").await;
        p.assert_has("Done: 1 dead letters");
    }
}

#[tokio::test]
async fn a_scoped_session_neither_lists_nor_reaches_another_namespaces_source() {
    for backend in backends() {
        let (app, key, mine, api, before) = with_sources(backend).await;
        let mut c = Console::signed_in(&app, &app.tokens[3]).await;
        let p = c.get("/console/sources").await;
        assert_eq!(p.status, 200);
        p.assert_has("/console/sources/mine\"");
        assert!(!p.text.contains("/console/sources/pay"), "{}", p.text);
        assert!(!c
            .get("/console")
            .await
            .text
            .contains("/console/sources/pay"));
        assert_eq!(c.get(&event_page("mine", &mine)).await.status, 200);
        for path in ["/console/sources/pay".to_owned(), event_page("pay", &key)] {
            let p = c.get(&path).await;
            assert_eq!(p.status, 404, "{backend:?} {path}: {}", p.text);
            assert!(!p.text.contains("script"), "{}", p.text);
            p.assert_secure_headers();
        }
        let csrf = c.csrf().await;
        let p = c
            .post(
                &format!("{}/redeliver", event_page("pay", &key)),
                &[("csrf", &csrf), ("note", "x")],
            )
            .await;
        assert_eq!(p.status, 404);
        let p = c
            .post_noted("/console/sources/pay/redeliver", &csrf, "x")
            .await;
        assert_eq!(p.status, 404);
        assert_eq!(api.record("pay", &key).await.body, before);
    }
}

#[tokio::test]
async fn an_event_page_shows_its_destinations_and_replays_one_alone() {
    for backend in backends() {
        let app = app_with_tokens(backend).await;
        let admin = app.as_token(Some(&app.tokens[0]));
        // Nothing listens on port 9: both deliveries fail, once, into review.
        let retry = json!({"max_attempts": 1, "base_ms": 1, "max_ms": 1});
        let doc = json!({
            "provider": "stripe", "secrets": [STRIPE_SECRET],
            "forwards": {
                "crm": {"url": "http://127.0.0.1:9/crm", "timeout_ms": 500, "retry": retry},
                "slack": {"url": "http://127.0.0.1:9/slack", "timeout_ms": 500, "retry": retry},
            },
        });
        let r = admin
            .send(
                admin
                    .http
                    .put(format!("{}/v1/sources/pay", admin.base))
                    .json(&doc),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let key = post_signed(&app, "pay", br#"{"id":"evt_1","type":"invoice.paid"}"#).await;
        let dead = eventually(std::time::Duration::from_secs(10), || async {
            let crm = admin.record("pay", "evt_1:crm").await;
            let slack = admin.record("pay", "evt_1:slack").await;
            crm.body["record"]["state"] == "needs_review"
                && slack.body["record"]["state"] == "needs_review"
        })
        .await;
        assert!(dead);
        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        let page = c.get(&event_page("pay", &key)).await;
        assert_eq!(page.status, 200);
        page.assert_has_all(&[
            "Destinations",
            "evt_1:crm",
            "evt_1:slack",
            "Redeliver to slack",
        ]);
        let csrf = page.csrf();
        let path = format!("{}/redeliver", event_page("pay", &key));
        let p = c
            .post_csrf(
                &path,
                &csrf,
                &[("note", "slack only"), ("destination", "slack")],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.text);
        let slack = admin.record("pay", "evt_1:slack").await;
        assert!(
            slack.body["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["note"] == "slack only")),
            "{}",
            slack.text
        );
        let crm = admin.record("pay", "evt_1:crm").await;
        assert!(
            !crm.text.contains("slack only"),
            "the other destination is untouched: {}",
            crm.text
        );
    }
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;

async fn sink_handler(
    axum::extract::State(seen): axum::extract::State<Seen>,
    req: axum::extract::Request,
) -> impl axum::response::IntoResponse {
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let mut s = seen.lock().expect("lock");
    s.push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    (
        axum::http::StatusCode::CREATED,
        [("content-type", "application/json")],
        json!({"id": format!("msg_{}", s.len())}).to_string(),
    )
}

/// A loopback destination that keeps every request body it receives (and answers 201).
async fn counting_sink() -> (Seen, u16) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .fallback(axum::routing::any(sink_handler))
        .with_state(seen.clone());
    (seen, crate::loopback::serve(app).await)
}

/// An action that asks a person first: keyed by the order, identity order and recipient,
/// the text free (a regenerated draft), a credential in its headers.
fn followup_action(port: u16) -> Value {
    json!({
        "title": "Send the follow-up",
        "description": format!("Sends the follow-up e-mail of an order to its customer. {}", "Call it once per order. ".repeat(12)),
        "input_schema": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "to": {"type": "string"},
                "text": {"type": "string"}
            },
            "required": ["order_id", "to", "text"]
        },
        "key": "{order_id}:followup:v1",
        "identity": ["order_id", "to"],
        "approval": "required",
        "deliver": {"http": {
            "method": "POST",
            "url": format!("http://127.0.0.1:{port}/send/{{{{order_id}}}}?api_key=query-secret-1234"),
            "headers": {"Authorization": "Bearer s3cr3t-mail-token-9876"},
            "body": {"to": "{{to}}", "text": "{{text}}"}
        }}
    })
}

/// `tools/call` over the stateless revision: the `CallToolResult`.
async fn tool_call(api: &Api, ns: &str, tool: &str, args: Value) -> Value {
    let r = api
        .post(
            &format!("/mcp/{ns}"),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": tool, "arguments": args,
                              "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["result"].clone()
}

#[tokio::test]
async fn actions_are_listed_and_an_action_draft_is_shown_in_full_and_delivered_once_approved() {
    for backend in backends() {
        let (seen, port) = counting_sink().await;
        let app = app_with_tokens(backend).await;
        let admin = app.as_token(Some(&app.tokens[0]));
        let operator = app.as_token(Some(&app.tokens[1]));
        let worker = app.as_token(Some(&app.tokens[2]));
        let r = admin
            .patch(
                "/v1/namespaces/shop",
                json!({"egress": {"allow": [format!("127.0.0.1:{port}")]}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let r = admin
            .send(
                admin
                    .http
                    .put(format!(
                        "{}/v1/namespaces/shop/actions/send_followup",
                        admin.base
                    ))
                    .json(&followup_action(port)),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);

        let mut c = Console::signed_in(&app, &app.tokens[1]).await;
        // The namespace page links its actions; the actions page lists them without secrets.
        let ns = c.get("/console/ns/shop").await;
        assert_eq!(ns.status, 200, "{}", ns.text);
        ns.assert_has("href=\"/console/ns/shop/actions\"");
        let list = c.get("/console/ns/shop/actions").await;
        assert_eq!(list.status, 200, "{}", list.text);
        list.assert_secure_headers();
        for shown in [
            "send_followup",
            "Send the follow-up",
            "{order_id}:followup:v1",
            "order_id, to",
            "required",
            "HTTP POST",
            &format!("127.0.0.1:{port}/send/{{{{order_id}}}}"),
            "Authorization: …9876",
            "<details><summary>show all",
        ] {
            assert!(list.text.contains(shown), "{shown:?} in {}", list.text);
        }
        for hidden in ["s3cr3t-mail-token", "query-secret-1234", "api_key"] {
            assert!(
                !list.text.contains(hidden),
                "{hidden:?} leaked: {}",
                list.text
            );
        }

        // The agent's first call stores the draft; nothing is sent.
        let args = json!({"order_id": "847", "to": "ada@example.com",
                          "text": "Hello Ada, <b>your order</b> shipped & is on its way."});
        let r = tool_call(&worker, "shop", "send_followup", args.clone()).await;
        assert_eq!(
            r["structuredContent"]["outcome"], "awaiting_approval",
            "{r}"
        );
        assert_eq!(seen.lock().expect("lock").len(), 0);

        let page = c.get(&rec("shop", "847:followup:v1")).await;
        assert_eq!(page.status, 200, "{}", page.text);
        assert!(page.text.contains("Draft to approve"));
        page.assert_has("href=\"/console/ns/shop/actions#action-send_followup\">send_followup</a> — Send the follow-up");
        // The stored arguments in full, pretty-printed and escaped.
        let pretty = serde_json::to_string_pretty(&args).expect("json");
        let escaped = pretty
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        assert!(page.text.contains(&escaped), "{escaped} in {}", page.text);
        assert!(!page.text.contains("<b>your order</b>"));
        assert!(!page.text.contains("s3cr3t-mail-token"));

        // Approve in the console: idem delivers the stored arguments once, through its outbox.
        let csrf = page.csrf();
        let path = format!("{}/approve", rec("shop", "847:followup:v1"));
        let p = c.post_noted(&path, &csrf, "wording checked").await;
        assert_eq!(p.status, 303, "{backend:?}: {}", p.text);
        let delivered = eventually(std::time::Duration::from_secs(10), || {
            let seen = seen.clone();
            async move { !seen.lock().expect("lock").is_empty() }
        })
        .await;
        assert!(
            delivered,
            "{backend:?}: the approved draft was not delivered"
        );
        let done = eventually(std::time::Duration::from_secs(10), || async {
            operator.record("shop", "847:followup:v1").await.body["record"]["state"] == "completed"
        })
        .await;
        assert!(done, "{backend:?}: the record did not complete");
        {
            let s = seen.lock().expect("lock");
            assert_eq!(s.len(), 1, "{s:?}");
            assert_eq!(s[0], json!({"to": "ada@example.com", "text": args["text"]}));
        }
        // A regenerated draft (other text, same identity) is replayed; nothing new is sent.
        let again = tool_call(
            &worker,
            "shop",
            "send_followup",
            json!({"order_id": "847", "to": "ada@example.com", "text": "Hi Ada, another wording."}),
        )
        .await;
        assert_eq!(
            again["structuredContent"]["outcome"], "completed",
            "{again}"
        );
        assert_eq!(again["structuredContent"]["replayed"], true);
        assert_eq!(seen.lock().expect("lock").len(), 1);
        // The completed record still names its action, and its arguments.
        let after = c.get(&rec("shop", "847:followup:v1")).await;
        after.assert_has("Arguments (prepared payload)");
        assert!(!after.text.contains(">Approve</button>"));
    }
}
