//! Namespace policy patches (the body of `PATCH /v1/namespaces/{ns}`): any JSON gives a policy
//! or an error naming a field, never a panic; an accepted policy obeys its cross-field rules,
//! reads back from its stored form (by patch and by serde) unchanged, is a fixed point of the
//! same patch, and its API form never carries the secret; a re-spelled patch gives the same
//! answer.
#![no_main]

use idem_core::policy::{Policy, PolicyError};
use idem_fuzz::{json, respell, safe_numbers};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn field_of(e: &PolicyError) -> &str {
    match e {
        PolicyError::UnknownField { field } | PolicyError::InvalidField { field, .. } => field,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(patch) = json(data) else { return };
    let with_alerts = Policy {
        daily_limit: Some(5),
        alert_url: Some("https://alerts.example/hook".into()),
        ..Policy::default()
    };
    for base in [Policy::default(), with_alerts] {
        let got = base.patch(&patch);
        if safe_numbers(&patch) {
            let again: Value = serde_json::from_str(&respell(&patch)).expect("reads back");
            assert_eq!(
                base.patch(&again),
                got,
                "re-spelled patch: {}",
                respell(&patch)
            );
        }
        match got {
            Ok(p) => {
                assert!(p.validate().is_ok());
                assert!(p.audit_retention_ms >= p.retention_ms);
                assert!(p.retry.max_ms >= p.retry.base_ms);
                assert!(p.lease_ms >= 1 && p.retry.max_attempts >= 1);
                assert_eq!(p.patch(&patch).as_ref(), Ok(&p), "a patch is a fixed point");
                let stored = p.to_stored_json();
                assert_eq!(Policy::default().patch(&stored).as_ref(), Ok(&p));
                assert_eq!(
                    serde_json::from_value::<Policy>(stored).ok().as_ref(),
                    Some(&p)
                );
                let shown = p.to_json();
                assert!(shown.get("alert_secret").is_none());
                assert_eq!(
                    shown["alert_secret_set"],
                    Value::Bool(p.alert_secret.is_some())
                );
                // The secret must not be shown through `alert_secret`; a patch that also
                // spells it elsewhere (inside its alert_url, say) shows it there, which is
                // the caller's own text, not a leak.
                let elsewhere = |secret: &str| {
                    let mut rest = patch.clone();
                    if let Some(o) = rest.as_object_mut() {
                        o.remove("alert_secret");
                    }
                    rest.to_string().contains(secret)
                        || serde_json::to_string(&base.to_json()).is_ok_and(|t| t.contains(secret))
                };
                if let Some(s) = p.alert_secret.as_ref().filter(|s| !elsewhere(s.expose())) {
                    let text = serde_json::to_string(&shown).expect("serializes");
                    assert!(!text.contains(s.expose()), "the secret is shown");
                    assert!(
                        !format!("{p:?}").contains(s.expose()),
                        "the secret is in Debug"
                    );
                }
            }
            Err(e) => {
                let f = field_of(&e);
                assert!(!e.to_string().is_empty());
                // The named field is a member of the patch (or one inside it), the policy as
                // a whole, or one of the cross-field rules.
                let named = patch.as_object().is_some_and(|o| {
                    o.keys().any(|k| {
                        f == k
                            || f.strip_prefix(k.as_str())
                                .is_some_and(|rest| rest.starts_with(['.', '[']))
                    })
                });
                assert!(
                    named || ["policy", "audit_retention_ms", "retry.max_ms"].contains(&f),
                    "{f} is not in {patch}"
                );
            }
        }
    }
});
