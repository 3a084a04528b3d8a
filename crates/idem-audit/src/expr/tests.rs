use super::js::{js_free_names, LOCAL_TEXT_MAX};
use super::*;

#[test]
fn idem_paths_are_found_by_path_not_host() {
    let url = "={{ $('idem settings').first().json.idem_url }}/v1/namespaces/{{ encodeURIComponent($('s').first().json.namespace) }}/keys/{{ encodeURIComponent($json.body.id + ':crm') }}/claim";
    let p = idem_path(url).unwrap();
    assert_eq!(p.op, "claim");
    assert_eq!(
        p.key.as_deref(),
        Some("{{ encodeURIComponent($json.body.id + ':crm') }}")
    );
    let p =
        idem_path("https://idem.example/v1/namespaces/pay/keys/order-1:charge/complete/").unwrap();
    assert_eq!(
        (p.op.as_str(), p.key.as_deref()),
        ("complete", Some("order-1:charge"))
    );
    assert_eq!(
        idem_path("http://x/v1/namespaces/a/keys/k").unwrap().op,
        "get"
    );
    assert_eq!(idem_path("http://x/v1/keys/derive").unwrap().op, "other");
    assert!(idem_path("https://api.stripe.com/v1/charges").is_none());
    assert!(idem_path("={{ $json.url }}").is_none());
}

#[test]
fn idem_paths_are_read_from_the_path_only() {
    let op = |url: &str| idem_path(url).map(|p| p.op);
    // In the query or the fragment, an idem path is another service's parameter.
    for url in [
        "https://api.example.com/send?next=/v1/namespaces/a/keys/b/claim",
        "https://api.example.com/send#/v1/namespaces/a/keys/b/complete",
        "=https://api.example.com/send?u={{ $json.u }}&next=/v1/namespaces/a/keys/b/claim",
        "https://api.example.com/send?x=1#/v1/keys/derive",
        "https://v1/namespaces/a/keys/b/claim",
    ] {
        assert_eq!(op(url), None, "{url}");
    }
    // The route's last segment must be the operation, exactly.
    for url in [
        "https://api.example.com/v1/namespaces/a/keys/b/claimx",
        "https://api.example.com/v1/namespaces/a/keys/b/claim/more",
        "https://api.example.com/v1/namespaces/a/keys/b/Claim",
        "https://api.example.com/v1/namespaces/a/keys/b/{{ $json.op }}",
        "https://api.example.com/v1/namespaces/a/keys/b/claim{{ $json.suffix }}",
        "https://api.example.com/v1/namespaces/a/keys//claim",
        "https://api.example.com/v1/namespaces/a/pausex",
        "https://api.example.com/v1/keys/derivex",
        "https://api.example.com/v1/tokens/extra",
        "https://api.example.com/v1/auditx",
    ] {
        assert_eq!(op(url), None, "{url}");
    }
    // A query or fragment after an idem path, a proxy prefix before it, a trailing slash.
    assert_eq!(
        op("https://idem.example/v1/namespaces/a/keys/b/claim?wait=1#x").as_deref(),
        Some("claim")
    );
    assert_eq!(
        op("https://gw.example/idem/v1/namespaces/a/keys/b/complete/").as_deref(),
        Some("complete")
    );
    assert_eq!(
        op("https://idem.example/v1/namespaces/a/keys/b/heartbeat").as_deref(),
        Some("heartbeat")
    );
    for url in [
        "https://idem.example/v1/namespaces/a",
        "https://idem.example/v1/namespaces/a/pause",
        "https://idem.example/v1/namespaces/a/keys",
        "https://idem.example/v1/namespaces/a/keys/?limit=10",
        "https://idem.example/v1/tokens",
        "https://idem.example/v1/audit",
    ] {
        assert_eq!(op(url).as_deref(), Some("other"), "{url}");
    }
    // Expressions in the base URL, the namespace and the key still count, also when they
    // hold a `?` or a `#` of their own.
    let p =
        idem_path("={{ $vars.IDEM_URL }}/v1/namespaces/{{ $vars.NS }}/keys/{{ $json.key }}/claim")
            .unwrap();
    assert_eq!(
        (p.op.as_str(), p.key.as_deref()),
        ("claim", Some("{{ $json.key }}"))
    );
    let p = idem_path(
        "=https://idem.example/v1/namespaces/pay/keys/{{ $json.id ? $json.id + '#1' : 'x' }}:charge/effect?trace=1",
    )
    .unwrap();
    assert_eq!(
        (p.op.as_str(), p.key.as_deref()),
        (
            "effect",
            Some("{{ $json.id ? $json.id + '#1' : 'x' }}:charge")
        )
    );
    assert_eq!(
        op("  =https://idem.example/v1/namespaces/a/keys/{{ $json.k }}  ").as_deref(),
        Some("get")
    );
}

#[test]
fn url_paths_leave_out_scheme_host_query_and_fragment() {
    assert_eq!(url_path("https://h:8080/a/b?c=/d#e").1, "/a/b");
    assert_eq!(url_path("=http://h").1, "");
    let (at, path) = url_path("={{ $vars.BASE }}/x?y");
    assert_eq!((at, path.len()), (1, "{{ $vars.BASE }}/x".len()));
    assert!(path.ends_with("/x"));
}

#[test]
fn volatile_tokens_and_date_cuts() {
    let t = volatile_tokens("={{ $execution.id + ':' + Math.random() }}");
    let names: Vec<_> = t.iter().map(|v| v.token).collect();
    assert_eq!(names, ["$execution.id", "Math.random()"]);
    assert!(volatile_tokens("{{ $now.toUTC().toFormat('yyyy-LL-dd') }}")[0].date_cut);
    assert!(!volatile_tokens("{{ $now.toFormat('yyyy-LL-dd HH:mm') }}")[0].date_cut);
    assert!(volatile_tokens("{{ $now.toISODate() }}")[0].date_cut);
    assert!(volatile_tokens("new Date().toISOString().slice(0, 10)")[0].date_cut);
    assert!(!volatile_tokens("{{ $now }}")[0].date_cut);
    assert!(volatile_tokens("{{ $today }}")[0].date_cut);
    // A multi-byte character where the look-ahead window ends.
    let long = format!("{{{{ $now }}}}{}", "é".repeat(100));
    assert!(!volatile_tokens(&long)[0].date_cut);
    // A date parsed from the event is not a clock; a field named like a generator is not one.
    assert!(volatile_tokens("new Date($json.created_at).getTime() + $json.event_uuid").is_empty());
    assert_eq!(
        volatile_tokens("crypto.randomUUID()")[0].token,
        "randomUUID()"
    );
    assert_eq!(volatile_tokens("uuidv4()")[0].token, "uuid()");
}

#[test]
fn whole_body_versus_a_field_of_it() {
    assert_eq!(whole_body("={{ $json.body }}"), Some("$json.body"));
    assert_eq!(
        whole_body("{{ JSON.stringify($json.body) }}"),
        Some("JSON.stringify($json…)")
    );
    assert_eq!(
        whole_body("$('Webhook').item.json.body"),
        Some("$json.body")
    );
    assert_eq!(whole_body("={{ $json.body.id }}"), None);
    assert_eq!(whole_body("$('Webhook').item.json.body['id']"), None);
    assert_eq!(whole_body("={{ $json.key }}"), None);
}

#[test]
fn field_refs_and_js_assignments() {
    let refs =
        field_refs("{{ $json.key }} {{ $('Build key').item.json.idem_key }} {{ $json['k2'] }}");
    assert_eq!(
        refs[0],
        FieldRef {
            node: None,
            field: "key".into()
        }
    );
    assert_eq!(
        refs[1],
        FieldRef {
            node: Some("Build key".into()),
            field: "idem_key".into()
        }
    );
    assert_eq!(refs[2].field, "k2");
    let code = "const key = `evt-${$json.body.id}`;\nreturn [{ json: { idem_key: $execution.id + ':x', other: Date.now() } }];";
    for (field, want) in [
        ("idem_key", "$execution.id + ':x'"),
        ("key", "`evt-${$json.body.id}`"),
    ] {
        assert_eq!(js_assignment(code, field).unwrap(), want, "{field}");
    }
    assert!(js_assignment(code, "missing").is_none());
    assert!(js_assignment("if (a.key == b) {}", "key").is_none());
}

#[test]
fn whole_body_through_code_node_item_forms_and_helpers() {
    let whole = "JSON.stringify($json…)";
    for text in [
        "JSON.stringify($input.item.json.body)",
        "JSON.stringify(item.json.body)",
        "JSON.stringify(item.json)",
        "JSON.stringify(items[i].json)",
        "JSON.stringify(items)",
        "JSON.stringify(item)",
        "JSON.stringify($input.all())",
        "JSON.stringify($input.first().json.body, null, 2)",
        "JSON.stringify( ( $json.body ) )",
        "JSON.stringify($json['body'])",
        "JSON.stringify($('Webhook').last().json)",
        "JSON.stringify($items(\"Webhook\")[0].json.body)",
        "$crypto.sha256(JSON.stringify($json.body))",
        "crypto.createHash('sha256').update(JSON.stringify($input.item.json.body)).digest('hex')",
        "new TextEncoder().encode(JSON.stringify($json))",
    ] {
        assert_eq!(whole_body(text), Some(whole), "{text}");
    }
    assert_eq!(
        whole_body("={{ $json.body.toJsonString().hash('sha256') }}"),
        Some("$json.body.toJsonString()")
    );
    assert_eq!(
        whole_body("{{ $('Webhook').item.json.toJsonString() }}"),
        Some("$json.toJsonString()")
    );
    assert_eq!(whole_body("sha256(item.json.body)"), Some("$json.body"));
    assert_eq!(whole_body("{ ...$input.item.json }"), Some("$json"));
    // A field of the body, or chosen fields, are not the whole body.
    for text in [
        "JSON.stringify($json.body.id)",
        "JSON.stringify($json.body.order_id, null, 2)",
        "JSON.stringify(item.json.body.order_id)",
        "JSON.stringify({ order: $json.body.order_id, customer: $json.body.customer_id })",
        "JSON.stringify([$input.item.json.body.id, 'receipt'])",
        "crypto.createHash('sha256').update(String($json.body.id)).digest('hex')",
        "$json.body.id.toString()",
        "$json.body.toJsonString",
        "await res.json()",
        "items.length",
        "JSON.stringify(",
        "",
    ] {
        assert_eq!(whole_body(text), None, "{text}");
    }
}

#[test]
fn stringify_arguments() {
    assert_eq!(
        stringify_args("JSON.stringify($json.body, null, 2) + JSON . stringify ( {a: [1, 2]} )"),
        ["$json.body", "{a: [1, 2]}"]
    );
    assert_eq!(stringify_args("JSON.stringify()"), [""]);
    assert!(stringify_args("JSON.parse(x)").is_empty());
}

#[test]
fn js_assignments_shorthand_and_bracket_forms() {
    assert_eq!(
        js_assignment(
            "return { json: { ...$json, idempotencyKey } };",
            "idempotencyKey"
        )
        .as_deref(),
        Some("idempotencyKey")
    );
    assert_eq!(
        js_assignment(
            "return [{ json: { idempotencyKey, other: 1 } }];",
            "idempotencyKey"
        )
        .as_deref(),
        Some("idempotencyKey")
    );
    assert_eq!(
        js_assignment("item.json['idempotencyKey'] = h;", "idempotencyKey").as_deref(),
        Some("h")
    );
    assert_eq!(
        js_assignment("item.json[\"idempotencyKey\"]=h", "idempotencyKey").as_deref(),
        Some("h")
    );
    assert_eq!(
        js_assignment("$json.idempotencyKey = sha(x);", "idempotencyKey").as_deref(),
        Some("sha(x)")
    );
    // A call argument, a comparison or a string are no assignment.
    assert!(js_assignment("log(a, idempotencyKey);", "idempotencyKey").is_none());
    assert!(js_assignment("if (idempotencyKey === k) {}", "idempotencyKey").is_none());
    assert!(js_assignment("const s = ['idempotencyKey', 1];", "idempotencyKey").is_none());
}

#[test]
fn js_locals_and_their_values() {
    let code = "let crypto;\ntry {\n  crypto = require('crypto');\n} catch (e) {}\nconst hash = crypto.createHash('sha256').update(body).digest('hex');\nvar n = 1, m = 2;\nfor (let i = 0; i < 3; i++) {}\nobj.prop = 3;\n$dollar = 4;\nconst f = (x) => x;\nif (hash == 1) {}";
    for (name, want) in [
        ("crypto", "require('crypto')"),
        (
            "hash",
            "crypto.createHash('sha256').update(body).digest('hex')",
        ),
        ("n", "1"),
        ("i", "0"),
        ("f", "(x) => x"),
    ] {
        assert_eq!(js_local(code, name).as_deref(), Some(want), "{name}");
    }
    assert!(js_local(code, "m").is_none(), "only the first of a list");
    assert!(
        js_local(code, "prop").is_none(),
        "a property is not a local"
    );
    assert!(
        js_local(code, "dollar").is_none(),
        "$dollar is another name"
    );
    assert!(js_local(code, "body").is_none());
    assert!(js_local(code, "").is_none());
    assert_eq!(
        js_local("let k = 1; k = 2;", "k").as_deref(),
        Some("1 | 2"),
        "every assignment"
    );
}

#[test]
fn js_locals_are_expanded_into_the_value() {
    // One local variable.
    let code = "const crypto = require('crypto');\nconst hash = crypto.createHash('sha256').update(JSON.stringify($input.item.json.body)).digest('hex');\nreturn { json: { ...$json, idempotencyKey: hash } };";
    assert_eq!(
            js_expand_locals(code, "hash"),
            "(require('crypto').createHash('sha256').update(JSON.stringify($input.item.json.body)).digest('hex'))"
        );
    // Three rounds: the key, the digest, the data.
    let code = "const data = new TextEncoder().encode(JSON.stringify($json.body));\nconst digest = await crypto.subtle.digest('SHA-256', data);\nconst idempotencyKey = [...new Uint8Array(digest)].map((b) => b.toString(16)).join('');";
    let v = js_expand_locals(code, "idempotencyKey");
    assert!(v.contains("JSON.stringify($json.body)"), "{v}");
    // A plain read replaces the name as it is, so a field of it stays a field.
    let code = "const body = $('Webhook').first().json.body;\nconst other = body.id || 'x';";
    assert_eq!(
            js_expand_locals(code, "`${body.order_id}:${other}`"),
            "`${$('Webhook').first().json.body.order_id}:${($('Webhook').first().json.body.id || 'x')}`"
        );
    // Property names, object keys, strings and template text are not variables; a spread is.
    let code = "const id = $json.body.id;\nconst order = $json.body;";
    assert_eq!(
        js_expand_locals(
            code,
            "x.id + { id: 1 }.id + 'id' + `order-${id}` + [...order]"
        ),
        "x.id + { id: 1 }.id + 'id' + `order-${$json.body.id}` + [...$json.body]"
    );
    // Unknown names stay; a variable assigned from itself ends.
    assert_eq!(js_expand_locals("", "a + b"), "a + b");
    assert_eq!(
        js_expand_locals("let h = 1; h = h + 1;", "h"),
        "(1 | (1 | (1 | (1 | h + 1) + 1) + 1) + 1)"
    );
}

#[test]
fn js_local_expansion_is_bounded() {
    // Every round multiplies the text by four: the text stops growing at the limit.
    let code = "const a = b + b + b + b;\nconst b = c + c + c + c;\nconst c = d + d + d + d;\nconst d = e + e + e + e;\nconst e = 'x'.repeat(1000);";
    let code = code.replace("'x'.repeat(1000)", &format!("'{}'", "x".repeat(1900)));
    let v = js_expand_locals(&code, "a + a + a + a + a + a + a + a");
    assert!(v.len() <= LOCAL_TEXT_MAX, "{}", v.len());
    // Template literals nested far deeper than anyone writes them do not overflow the stack.
    let deep = "`${".repeat(20_000);
    let _ = js_expand_locals("const a = 1;", &deep);
    let _ = js_free_names(&deep);
}

#[test]
fn canonical_item_reads_write_one_form() {
    let canonical = "{{ $json.body.event_id }}";
    for read in [
        "$json.body.event_id",
        "$('Webhook').item.json.body.event_id",
        "$(\"Webhook\").item.json.body.event_id",
        "$('Webhook').first().json.body.event_id",
        "$('Webhook').last().json.body.event_id",
        "$('Webhook').all()[0].json.body.event_id",
        "$('Webhook').itemMatching(0).json.body.event_id",
        "$('Webhook (prod)').item.json.body.event_id",
        "$('Web}}hook').item.json.body.event_id",
        "$node[\"Webhook\"].json.body.event_id",
        "$node['Webhook'].json.body.event_id",
        "$node.Webhook.json.body.event_id",
        "$input.item.json.body.event_id",
        "$input.first().json.body.event_id",
        "$input.all()[0].json.body.event_id",
        "$items(\"Webhook\")[0].json.body.event_id",
        "$items()[0].json.body.event_id",
        "$json['body']['event_id']",
        "$json[\"body\"].event_id",
        "$('Webhook').item.json.body[ 'event_id' ]",
    ] {
        let key = format!("{{{{ {read} }}}}");
        if read.contains("}}") {
            // `}}` in a node's name ends the expression: n8n reads it so too.
            assert_ne!(canonical_item_reads(&key), canonical, "{read}");
            continue;
        }
        assert_eq!(canonical_item_reads(&key), canonical, "{read}");
    }
    assert_eq!(
        canonical_item_reads("={{ encodeURIComponent($('Webhook').item.json.body.id + ':crm') }}"),
        "={{ encodeURIComponent($json.body.id + ':crm') }}"
    );
    assert_eq!(
        canonical_item_reads("=order-{{ $node[\"Order webhook\"].json.body['order-id'] }}:charge"),
        "=order-{{ $json.body['order-id'] }}:charge",
        "a bracket read of a name that is no identifier stays"
    );
    assert_eq!(
        canonical_item_reads("{{ $( 'Webhook' ) . first ( ) . json . body }}"),
        "{{ $json . body }}"
    );
    // Literal text is kept, even when it looks like a read; Code-node item variables are
    // not n8n expressions.
    for text in [
        "daily-report.json:send",
        "$('A').item.json.k",
        "no reads :crm",
        "{{ item.json.k }}",
        "{{ $json.k",
        "",
    ] {
        assert_eq!(canonical_item_reads(text), text);
    }
    assert_eq!(
        canonical_item_reads("{{ $('A').item.json.k }}-{{ $node['B'].json['k2'] }}"),
        "{{ $json.k }}-{{ $json.k2 }}"
    );
    assert_eq!(
        canonical_item_reads("{{ $('A').item.json.k"),
        "{{ $json.k",
        "an unclosed expression runs to the end"
    );
}

proptest::proptest! {
    #[test]
    fn new_readings_are_total(code in "\\PC{0,200}", value in "\\PC{0,80}") {
        let _ = whole_body(&value);
        let _ = stringify_args(&value);
        let _ = js_assignment(&code, &value);
        let _ = js_local(&code, &value);
        let v = js_expand_locals(&code, &value);
        proptest::prop_assert!(v.len() <= LOCAL_TEXT_MAX.max(value.len()));
        let c = canonical_item_reads(&value);
        proptest::prop_assert_eq!(canonical_item_reads(&c), c.clone());
        let key = format!("{{{{ {value} }}}}");
        let c = canonical_item_reads(&key);
        proptest::prop_assert_eq!(canonical_item_reads(&c), c.clone());
    }
}

#[test]
fn literal_pieces_of_keys() {
    assert_eq!(
        literal_pieces("{{ encodeURIComponent($json.body.id + ':crm') }}"),
        [":crm"]
    );
    assert_eq!(
        literal_pieces("=order-{{ $json.id }}:charge"),
        ["order-", ":charge"]
    );
    assert_eq!(
        literal_pieces("={{ `job-${$json.id}:ship` }}"),
        ["job-", ":ship"]
    );
    assert!(literal_pieces("={{ $json.idem.key }}").is_empty());
}

#[test]
fn outcome_comparisons() {
    assert_eq!(
        outcome_comparison("={{ $json.body.outcome === 'acquired' }}"),
        Some((true, "acquired".into()))
    );
    assert_eq!(
        outcome_comparison("={{ $json.outcome != \"completed\" }}"),
        Some((false, "completed".into()))
    );
    assert_eq!(
        outcome_comparison("={{ 'acquired' == $json.body.outcome }}"),
        Some((true, "acquired".into()))
    );
    assert_eq!(outcome_comparison("={{ $json.statusCode === 200 }}"), None);
    // A longer name holding the word is another field.
    assert_eq!(
        outcome_comparison("={{ $json.outcome_note === 'acquired' }}"),
        None
    );
    assert_eq!(
        outcome_comparison("={{ $json.previous_outcome === 'acquired' }}"),
        None
    );
    assert_eq!(
        outcome_comparison("={{ 'acquired' === $json.previous_outcome }}"),
        None
    );
    assert!(reads_outcome("={{ $json.body.outcome }}"));
    assert!(reads_outcome("={{ $json[\"outcome\"] }}"));
    assert!(!reads_outcome("={{ $json.outcome_note }}"));
    assert!(!reads_outcome("={{ $json.previous_outcome }}"));
}

#[test]
fn static_data_is_seen_in_code() {
    assert!(uses_static_data(
        "const s = $getWorkflowStaticData('global');"
    ));
    assert!(!uses_static_data("const s = $json.staticData;"));
}
