//! The node lists, as data, in one place: which node types are triggers, which operations of
//! which node types change the world (side effects), which providers honour an idempotency
//! key, and the idem node itself.
//!
//! Checked against the node descriptions of `n8n-nodes-base` 2.8.1 (the package n8n 2.8.4
//! ships, the version the e2e test runs): type names, typeVersions, the `resource` and
//! `operation` values and their defaults. A parameter an export omits is at its default, so
//! the defaults below decide what a bare node does (a Gmail v2 node without `operation`
//! sends; a Postgres v2 node without one inserts). To add a node, add a row here.

/// The community node of idem (package `n8n-nodes-idem`).
pub const IDEM_NODE: &str = "n8n-nodes-idem.idempotencyGate";
pub const HTTP_REQUEST: &str = "n8n-nodes-base.httpRequest";
pub const WEBHOOK: &str = "n8n-nodes-base.webhook";
pub const RESPOND_TO_WEBHOOK: &str = "n8n-nodes-base.respondToWebhook";
pub const REMOVE_DUPLICATES: &str = "n8n-nodes-base.removeDuplicates";
pub const IF: &str = "n8n-nodes-base.if";
pub const SWITCH: &str = "n8n-nodes-base.switch";
pub const SET: &str = "n8n-nodes-base.set";
pub const CRYPTO: &str = "n8n-nodes-base.crypto";
/// An agent's HTTP Request tool (`n8n-nodes-base` since n8n 1.7x).
pub const HTTP_REQUEST_TOOL: &str = "n8n-nodes-base.httpRequestTool";
/// The older HTTP Request tool of the AI nodes.
pub const LANGCHAIN_HTTP_TOOL: &str = "@n8n/n8n-nodes-langchain.toolHttpRequest";
/// An agent's MCP Client Tool: every tool of one MCP server.
pub const MCP_CLIENT_TOOL: &str = "@n8n/n8n-nodes-langchain.mcpClientTool";
/// Nodes whose parameters are JavaScript (read as text, like expressions).
pub const CODE_NODES: &[&str] = &[
    "n8n-nodes-base.code",
    "n8n-nodes-base.function",
    "n8n-nodes-base.functionItem",
];

/// Trigger types that do not end in `Trigger` (every `*Trigger` type is a trigger too:
/// Schedule, Manual, Execute Workflow, Form, Chat, Error and every app trigger). These are
/// the nodes of `n8n-nodes-base` in the trigger group whose type name says nothing of it.
pub const TRIGGERS: &[&str] = &[
    WEBHOOK,
    "n8n-nodes-base.cron",
    "n8n-nodes-base.interval",
    "n8n-nodes-base.start",
    // Email Trigger (IMAP): polls a mailbox; each new mail starts an execution.
    "n8n-nodes-base.emailReadImap",
];

/// Triggers that fire on a clock: under them alone a key from today's date is stable.
pub const SCHEDULE_TRIGGERS: &[&str] = &[
    "n8n-nodes-base.scheduleTrigger",
    "n8n-nodes-base.cron",
    "n8n-nodes-base.interval",
];

pub fn is_trigger(node_type: &str) -> bool {
    TRIGGERS.contains(&node_type) || node_type.ends_with("Trigger")
}

pub fn is_schedule(node_type: &str) -> bool {
    SCHEDULE_TRIGGERS.contains(&node_type)
}

/// What kind of world-change a node makes (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectKind {
    Message,
    Record,
    Database,
    Subworkflow,
    Http,
    /// Given with `--side-effect`.
    Custom,
}

/// One app node: how its `resource` and `operation` default, and which operations write.
#[derive(Debug)]
pub struct EffectSpec {
    pub node_type: &'static str,
    pub label: &'static str,
    pub kind: EffectKind,
    /// `(from typeVersion, default resource)`: the last row whose version ≤ the node's wins;
    /// `""` when that version has no `resource` parameter.
    pub resource_default: &'static [(f64, &'static str)],
    /// `(from typeVersion, resource, default operation)`, same reading.
    pub operation_default: &'static [(f64, &'static str, &'static str)],
    /// Writing operations: `op` (any resource) or `resource:op`; a trailing `*` matches a
    /// prefix (`message:send*`).
    pub writes: &'static [&'static str],
}

const NO_RESOURCE: &[(f64, &str)] = &[(0.0, "")];

/// Every app and database node whose writes count as side effects.
pub const EFFECTS: &[EffectSpec] = &[
    // ---- e-mail and messages
    EffectSpec {
        node_type: "n8n-nodes-base.emailSend",
        label: "Send Email",
        kind: EffectKind::Message,
        resource_default: &[(0.0, ""), (2.0, "email")],
        operation_default: &[(0.0, "", "send"), (2.0, "email", "send")],
        writes: &["send", "sendAndWait"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.gmail",
        label: "Gmail",
        kind: EffectKind::Message,
        resource_default: &[(0.0, "draft"), (2.0, "message")],
        operation_default: &[(0.0, "message", "send"), (0.0, "draft", "create")],
        writes: &[
            "message:send",
            "message:reply",
            "message:sendAndWait",
            "thread:reply",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.microsoftOutlook",
        label: "Microsoft Outlook",
        kind: EffectKind::Message,
        resource_default: &[(0.0, "message")],
        operation_default: &[(0.0, "message", "send"), (0.0, "draft", "create")],
        writes: &[
            "message:send",
            "message:reply",
            "message:sendAndWait",
            "draft:send",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.slack",
        label: "Slack",
        kind: EffectKind::Message,
        resource_default: &[(0.0, "message")],
        operation_default: &[(0.0, "message", "post"), (0.0, "file", "upload")],
        writes: &[
            "message:post",
            "message:postEphemeral",
            "message:update",
            "message:sendAndWait",
            "file:upload",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.discord",
        label: "Discord",
        kind: EffectKind::Message,
        // v1 has no operation: it posts to its webhook URL (early v1 exports name the one
        // resource, `webhook`). v2 with the default Bot Token connection opens on Channel →
        // Create (a new channel each run); with a Webhook connection it sends (see
        // `RESOURCE_BY_AUTH`).
        resource_default: &[(0.0, ""), (2.0, "channel")],
        operation_default: &[
            (0.0, "", "sendLegacy"),
            (0.0, "webhook", "sendLegacy"),
            (2.0, "channel", "create"),
            (2.0, "message", "send"),
            (2.0, "member", "getAll"),
        ],
        writes: &[
            "sendLegacy",
            "message:send",
            "message:sendAndWait",
            "channel:create",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.telegram",
        label: "Telegram",
        kind: EffectKind::Message,
        resource_default: &[(0.0, "message")],
        operation_default: &[(0.0, "message", "sendMessage")],
        writes: &["message:send*", "message:editMessageText"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.microsoftTeams",
        label: "Microsoft Teams",
        kind: EffectKind::Message,
        resource_default: &[(0.0, "channel")],
        operation_default: &[
            (0.0, "channelMessage", "create"),
            (0.0, "chatMessage", "create"),
            (0.0, "channel", "create"),
        ],
        writes: &[
            "channelMessage:create",
            "chatMessage:create",
            "chatMessage:sendAndWait",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.whatsApp",
        label: "WhatsApp",
        kind: EffectKind::Message,
        resource_default: &[(0.0, "message")],
        operation_default: &[(0.0, "message", "sendTemplate")],
        writes: &[
            "message:send",
            "message:sendTemplate",
            "message:sendAndWait",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.twilio",
        label: "Twilio",
        kind: EffectKind::Message,
        resource_default: &[(0.0, "sms")],
        operation_default: &[(0.0, "sms", "send"), (0.0, "call", "make")],
        writes: &["sms:send", "call:make"],
    },
    // ---- apps: creates and updates (upserts, appends, sends, posts); deletes are left out
    // because a repeated delete ends in the same state.
    EffectSpec {
        node_type: "n8n-nodes-base.stripe",
        label: "Stripe",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "balance")],
        operation_default: &[
            (0.0, "balance", "get"),
            (0.0, "charge", "get"),
            (0.0, "coupon", "create"),
            (0.0, "customer", "get"),
            (0.0, "customerCard", "get"),
            (0.0, "meterEvent", "create"),
            (0.0, "source", "get"),
            (0.0, "token", "create"),
        ],
        writes: &["create", "update", "add"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.hubspot",
        label: "HubSpot",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "deal"), (2.0, "contact")],
        operation_default: &[
            (0.0, "contact", "upsert"),
            (0.0, "contactList", "add"),
            (0.0, "company", "create"),
            (0.0, "deal", "create"),
            (0.0, "engagement", "create"),
            (0.0, "form", "getFields"),
            (0.0, "ticket", "create"),
        ],
        writes: &["create", "update", "upsert", "add", "submit"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.salesforce",
        label: "Salesforce",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "lead")],
        operation_default: &[
            (0.0, "lead", "create"),
            (0.0, "contact", "create"),
            (0.0, "customObject", "create"),
            (0.0, "document", "upload"),
            (0.0, "opportunity", "create"),
            (0.0, "account", "create"),
            (0.0, "search", "query"),
            (0.0, "case", "create"),
            (0.0, "task", "create"),
            (0.0, "attachment", "create"),
            (0.0, "user", "get"),
            (0.0, "flow", "invoke"),
        ],
        writes: &[
            "create",
            "update",
            "upsert",
            "addToCampaign",
            "addNote",
            "addComment",
            "upload",
            "invoke",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.pipedrive",
        label: "Pipedrive",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "deal")],
        operation_default: &[
            (0.0, "activity", "create"),
            (0.0, "deal", "create"),
            (0.0, "dealActivity", "getAll"),
            (0.0, "dealProduct", "add"),
            (0.0, "file", "create"),
            (0.0, "lead", "create"),
            (0.0, "note", "create"),
            (0.0, "organization", "create"),
            (0.0, "person", "create"),
            (0.0, "product", "getAll"),
        ],
        writes: &["create", "update", "add", "duplicate"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.shopify",
        label: "Shopify",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "order")],
        operation_default: &[(0.0, "order", "create"), (0.0, "product", "create")],
        writes: &["create", "update"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.airtable",
        label: "Airtable",
        kind: EffectKind::Record,
        resource_default: &[(0.0, ""), (2.0, "record")],
        operation_default: &[
            (0.0, "", "read"),
            (2.0, "record", "get"),
            (2.0, "base", "getMany"),
        ],
        writes: &["append", "update", "create", "upsert"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.notion",
        label: "Notion",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "page")],
        operation_default: &[
            (0.0, "block", "append"),
            (0.0, "database", "get"),
            (0.0, "databasePage", "create"),
            (0.0, "page", "create"),
            (0.0, "user", "get"),
        ],
        writes: &["append", "create", "update"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.googleSheets",
        label: "Google Sheets",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "sheet")],
        operation_default: &[(0.0, "sheet", "read"), (0.0, "spreadsheet", "create")],
        writes: &[
            "sheet:append",
            "sheet:appendOrUpdate",
            "sheet:update",
            "sheet:upsert",
        ],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.jira",
        label: "Jira",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "issue")],
        operation_default: &[
            (0.0, "issue", "create"),
            (0.0, "issueAttachment", "add"),
            (0.0, "issueComment", "add"),
            (0.0, "user", "create"),
        ],
        writes: &["create", "update", "add", "notify"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.zendesk",
        label: "Zendesk",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "ticket")],
        operation_default: &[
            (0.0, "ticket", "create"),
            (0.0, "ticketField", "get"),
            (0.0, "user", "create"),
            (0.0, "organization", "create"),
        ],
        writes: &["create", "update", "recover"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.freshdesk",
        label: "Freshdesk",
        kind: EffectKind::Record,
        resource_default: &[(0.0, "ticket")],
        operation_default: &[(0.0, "ticket", "create"), (0.0, "contact", "create")],
        writes: &["create", "update"],
    },
    // ---- databases: insert, update, upsert, delete and Execute Query
    EffectSpec {
        node_type: "n8n-nodes-base.postgres",
        label: "Postgres",
        kind: EffectKind::Database,
        resource_default: &[(0.0, ""), (2.0, "database")],
        operation_default: &[(0.0, "", "insert"), (2.0, "database", "insert")],
        writes: &["insert", "update", "upsert", "deleteTable", "executeQuery"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.mySql",
        label: "MySQL",
        kind: EffectKind::Database,
        resource_default: &[(0.0, ""), (2.0, "database")],
        operation_default: &[(0.0, "", "insert"), (2.0, "database", "insert")],
        writes: &["insert", "update", "upsert", "deleteTable", "executeQuery"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.microsoftSql",
        label: "Microsoft SQL",
        kind: EffectKind::Database,
        resource_default: NO_RESOURCE,
        operation_default: &[(0.0, "", "insert")],
        writes: &["insert", "update", "delete", "executeQuery"],
    },
    EffectSpec {
        node_type: "n8n-nodes-base.mongoDb",
        label: "MongoDB",
        kind: EffectKind::Database,
        resource_default: &[(0.0, "document")],
        operation_default: &[(0.0, "document", "find")],
        writes: &[
            "document:insert",
            "document:update",
            "document:delete",
            "document:findOneAndReplace",
            "document:findOneAndUpdate",
        ],
    },
    // ---- another workflow
    EffectSpec {
        node_type: "n8n-nodes-base.executeWorkflow",
        label: "Execute Workflow",
        kind: EffectKind::Subworkflow,
        resource_default: NO_RESOURCE,
        operation_default: &[(0.0, "", "call_workflow")],
        writes: &["*"],
    },
];

/// Connection types that fix the resource: `(node type, from typeVersion, authentication,
/// resource)`. The node hides its `resource` parameter then, so an export has none, and n8n
/// drops one left over from another connection type before the node runs.
pub const RESOURCE_BY_AUTH: &[(&str, f64, &str, &str)] = &[
    // Discord v2's router runs `webhook` when `resource` is hidden.
    ("n8n-nodes-base.discord", 2.0, "webhook", "webhook"),
];

/// The spec of an app node type, if it is in [`EFFECTS`].
pub fn effect_spec(node_type: &str) -> Option<&'static EffectSpec> {
    EFFECTS.iter().find(|e| e.node_type == node_type)
}

impl EffectSpec {
    /// The resource and operation a node performs (the resource its `authentication` fixes,
    /// else its own values, else the defaults of its typeVersion).
    pub fn resolve(
        &self,
        version: f64,
        authentication: Option<&str>,
        resource: Option<&str>,
        operation: Option<&str>,
    ) -> (String, String) {
        let fixed = authentication.and_then(|a| {
            RESOURCE_BY_AUTH
                .iter()
                .find(|(t, v, auth, _)| *t == self.node_type && *v <= version && *auth == a)
                .map(|(_, _, _, r)| *r)
        });
        let resource = match fixed.or(resource) {
            Some(r) => r.to_owned(),
            None => last_at(self.resource_default.iter().map(|(v, r)| (*v, *r)), version)
                .unwrap_or("")
                .to_owned(),
        };
        let operation = match operation {
            Some(o) => o.to_owned(),
            None => last_at(
                self.operation_default
                    .iter()
                    .filter(|(_, r, _)| *r == resource)
                    .map(|(v, _, o)| (*v, *o)),
                version,
            )
            .unwrap_or("")
            .to_owned(),
        };
        (resource, operation)
    }

    /// Whether `resource`/`operation` writes.
    pub fn writes(&self, resource: &str, operation: &str) -> bool {
        self.writes.iter().any(|w| {
            let (r, o) = match w.split_once(':') {
                Some((r, o)) => (Some(r), o),
                None => (None, *w),
            };
            if r.is_some_and(|r| r != resource) {
                return false;
            }
            match o.strip_suffix('*') {
                Some("") => true,
                Some(prefix) => operation.starts_with(prefix),
                None => o == operation,
            }
        })
    }
}

fn last_at<'a>(rows: impl Iterator<Item = (f64, &'a str)>, version: f64) -> Option<&'a str> {
    rows.filter(|(v, _)| *v <= version).last().map(|(_, x)| x)
}

/// HTTP methods that change the world.
pub const WRITING_METHODS: &[&str] = &["POST", "PUT", "PATCH", "DELETE"];

/// A provider whose API dedupes a repeated POST by a key the caller sends.
#[derive(Debug)]
pub struct KeyedProvider {
    pub name: &'static str,
    /// Host suffixes of its API.
    pub hosts: &'static [&'static str],
    /// n8n credential types for it (HTTP Request with a predefined credential).
    pub credentials: &'static [&'static str],
    /// n8n node types that call it (and send no key: the node has no header field).
    pub nodes: &'static [&'static str],
    pub header: &'static str,
    /// A body field that carries the key instead of a header (Square).
    pub body_field: Option<&'static str>,
}

pub const KEYED_PROVIDERS: &[KeyedProvider] = &[
    KeyedProvider {
        name: "Stripe",
        hosts: &["api.stripe.com"],
        credentials: &["stripeApi"],
        nodes: &["n8n-nodes-base.stripe"],
        header: "Idempotency-Key",
        body_field: None,
    },
    KeyedProvider {
        name: "PayPal",
        hosts: &[
            "api.paypal.com",
            "api-m.paypal.com",
            "api.sandbox.paypal.com",
            "api-m.sandbox.paypal.com",
        ],
        credentials: &["payPalApi"],
        nodes: &[],
        header: "PayPal-Request-Id",
        body_field: None,
    },
    KeyedProvider {
        name: "Adyen",
        hosts: &["adyen.com", "adyenpayments.com"],
        credentials: &[],
        nodes: &[],
        header: "Idempotency-Key",
        body_field: None,
    },
    KeyedProvider {
        name: "Square",
        hosts: &["squareup.com", "squareupsandbox.com"],
        credentials: &["squareApi"],
        nodes: &[],
        header: "Idempotency-Key",
        body_field: Some("idempotency_key"),
    },
    KeyedProvider {
        name: "Checkout.com",
        hosts: &["checkout.com"],
        credentials: &[],
        nodes: &[],
        header: "Cko-Idempotency-Key",
        body_field: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_node_descriptions() {
        let gmail = effect_spec("n8n-nodes-base.gmail").unwrap();
        let (r, o) = gmail.resolve(2.1, None, None, None);
        assert_eq!((r.as_str(), o.as_str()), ("message", "send"));
        assert!(gmail.writes(&r, &o));
        // Gmail v1 defaults to creating a draft: not a send.
        let (r, o) = gmail.resolve(1.0, None, None, None);
        assert!(!gmail.writes(&r, &o), "{r}:{o}");
        let pg = effect_spec("n8n-nodes-base.postgres").unwrap();
        let (r, o) = pg.resolve(2.6, None, None, None);
        assert!(pg.writes(&r, &o));
        assert!(!pg.writes("database", "select"));
        let stripe = effect_spec("n8n-nodes-base.stripe").unwrap();
        let (r, o) = stripe.resolve(1.0, None, Some("charge"), None);
        assert!(!stripe.writes(&r, &o), "charge defaults to get");
        assert!(stripe.writes("charge", "create"));
        let discord = effect_spec("n8n-nodes-base.discord").unwrap();
        // (typeVersion, authentication, resource) → what the node does.
        for (v, auth, res, want) in [
            (1.0, None, None, ("", "sendLegacy")),
            (2.0, None, None, ("channel", "create")),
            (2.0, Some("botToken"), Some("message"), ("message", "send")),
            (2.0, Some("webhook"), None, ("webhook", "sendLegacy")),
            (
                2.0,
                Some("webhook"),
                Some("channel"),
                ("webhook", "sendLegacy"),
            ),
        ] {
            let (r, o) = discord.resolve(v, auth, res, None);
            assert_eq!((r.as_str(), o.as_str()), want, "v{v} {auth:?} {res:?}");
            assert!(discord.writes(&r, &o), "{r}:{o}");
        }
        let (r, o) = discord.resolve(2.0, None, Some("member"), None);
        assert!(!discord.writes(&r, &o), "{r}:{o}");
        let tg = effect_spec("n8n-nodes-base.telegram").unwrap();
        assert!(tg.writes("message", "sendPhoto"));
        assert!(!tg.writes("chat", "get"));
    }

    #[test]
    fn triggers_by_list_and_by_suffix() {
        assert!(is_trigger("n8n-nodes-base.webhook"));
        assert!(is_trigger("n8n-nodes-base.stripeTrigger"));
        assert!(is_trigger("@n8n/n8n-nodes-langchain.chatTrigger"));
        assert!(is_trigger("n8n-nodes-base.emailReadImap"));
        assert!(!is_trigger("n8n-nodes-base.emailSend"));
        assert!(!is_trigger("n8n-nodes-base.httpRequest"));
        assert!(is_schedule("n8n-nodes-base.cron"));
    }
}
