//! Namespace settings (defaults, patch, pause, refused fields) and API tokens (create, find,
//! count, expire, list, revoke, touch).
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::sync::Arc;

use idem_core::{ClaimRequest, Policy, PolicyError, State, Timestamp};
use idem_store::{hash_secret, NamespaceChange, NewApiToken, Role, StoreError};
use serde_json::json;

use super::into_state;
use crate::contract::{key, ns, Backend, H, T0};

// ================================================================ namespaces

pub async fn namespace_defaults_patch_and_pause<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "fresh-ns").await;
    let info = h.store.namespace(&h.ns).await.expect("namespace");
    assert_eq!(info.namespace, "fresh-ns");
    assert!(!info.paused);
    assert_eq!(info.policy, Policy::default());
    assert_eq!(info.counts.0.len(), 7, "every state, zeros included");
    assert!(State::ALL.iter().all(|s| info.counts.get(*s) == 0));
    let info = h
        .patch(json!({"retry": {"max_attempts": 3}, "lease_ms": 5000, "alert_url": "https://x.example/h"}))
        .await;
    let mut want = Policy::default();
    want.retry.max_attempts = 3;
    want.lease_ms = 5000;
    want.alert_url = Some("https://x.example/h".into());
    assert_eq!(info.policy, want, "patch merges recursively");
    let info = h.patch(json!({"retry": {"base_ms": 10}})).await;
    want.retry.base_ms = 10;
    assert_eq!(info.policy, want);
    assert_eq!(h.store.namespace(&h.ns).await.expect("ns").policy, want);
    // the policy applies to claims
    let c = h.claim(&key("k")).await;
    assert_eq!(
        c.record.expect("record").lease_expires_at,
        Some(Timestamp(T0 + 5000))
    );
    into_state(&h, &key("r"), State::NeedsReview, ClaimRequest::default()).await;
    let info = h.store.namespace(&h.ns).await.expect("ns");
    assert_eq!(info.counts.get(State::Processing), 1);
    assert_eq!(info.counts.get(State::NeedsReview), 1);
    assert_eq!(info.counts.get(State::Completed), 0);
    // pause and resume keep the policy
    let info = h.change(NamespaceChange::Pause).await;
    assert!(info.paused);
    assert_eq!(info.policy, want);
    let info = h.change(NamespaceChange::Resume).await;
    assert!(!info.paused);
    assert_eq!(info.policy, want);
    // a patch to null clears optional fields
    let info = h.patch(json!({"alert_url": null})).await;
    assert_eq!(info.policy.alert_url, None);
    // another namespace still has the defaults
    let other = h.store.namespace(&ns("other")).await.expect("ns");
    assert_eq!(other.policy, Policy::default());
    assert!(
        State::ALL.iter().all(|s| other.counts.get(*s) == 0),
        "counts are per namespace: {:?}",
        other.counts
    );
}

pub async fn namespace_patch_refuses_bad_fields_and_changes_nothing<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let base = h.patch(json!({"lease_ms": 1234})).await.policy;
    let cases = [
        (json!({"bogus": 1}), "bogus", true),
        (
            json!({"retry": {"nope": 1}, "lease_ms": 99}),
            "retry.nope",
            true,
        ),
        (json!({"lease_ms": "x"}), "lease_ms", false),
        (
            json!({"lease_ms": 5, "retry": {"max_attempts": 0}}),
            "retry.max_attempts",
            false,
        ),
    ];
    for (patch, field, unknown) in cases {
        let r = h
            .store
            .update_namespace(&h.ns, NamespaceChange::Patch(patch.clone()), h.now())
            .await;
        match r {
            Err(StoreError::Policy(PolicyError::UnknownField { field: f })) if unknown => {
                assert_eq!(f, field)
            }
            Err(StoreError::Policy(PolicyError::InvalidField { field: f, .. })) if !unknown => {
                assert_eq!(f, field)
            }
            other => panic!("{patch}: {:?}", other.map(|i| i.policy)),
        }
        let now = h.store.namespace(&h.ns).await.expect("ns").policy;
        assert_eq!(now, base, "{patch}: a refused patch changes nothing");
    }
}

// ================================================================ API tokens

pub async fn api_tokens_create_find_and_count<B: Backend>(b: Arc<B>) {
    let store = b.open().await;
    assert_eq!(store.token_count().await.expect("count"), 0);
    let secret = "idem_0123456789abcdef";
    store
        .create_token(
            NewApiToken {
                secret_hash: hash_secret(secret),
                role: Role::Operator,
                scope: "payments".into(),
                label: Some("ops laptop".into()),
                expires_at: None,
            },
            Timestamp(T0),
        )
        .await
        .expect("create");
    store
        .create_token(
            NewApiToken {
                secret_hash: hash_secret("idem_other"),
                role: Role::Admin,
                scope: "*".into(),
                label: None,
                expires_at: None,
            },
            Timestamp(T0),
        )
        .await
        .expect("create");
    assert_eq!(store.token_count().await.expect("count"), 2);
    let t = store
        .find_token(&hash_secret(secret))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!(t.secret_hash, hash_secret(secret));
    assert_eq!(t.role, Role::Operator);
    assert_eq!(t.scope, "payments");
    assert_eq!(t.label.as_deref(), Some("ops laptop"));
    let admin = store
        .find_token(&hash_secret("idem_other"))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!((admin.role, admin.scope.as_str()), (Role::Admin, "*"));
    assert_ne!(admin.id, t.id);
    assert!(store
        .find_token(&hash_secret("idem_unknown"))
        .await
        .expect("find")
        .is_none());
}

pub async fn api_tokens_expire_list_revoke_and_touch<B: Backend>(b: Arc<B>) {
    let store = b.open().await;
    let new = |secret: &str, role, scope: &str, expires_at| NewApiToken {
        secret_hash: hash_secret(secret),
        role,
        scope: scope.into(),
        label: None,
        expires_at,
    };
    let at = Timestamp(T0);
    store
        .create_token(new("idem_a", Role::Admin, "*", None), at)
        .await
        .expect("create");
    store
        .create_token(
            new("idem_w", Role::Worker, "pay", Some(Timestamp(T0 + 60_000))),
            at.plus_ms(1),
        )
        .await
        .expect("create");
    let w = store
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!(w.created_at, at.plus_ms(1));
    assert_eq!(w.expires_at, Some(Timestamp(T0 + 60_000)));
    assert_eq!(w.last_used_at, None);
    assert!(!w.expired(Timestamp(T0 + 59_999)));
    assert!(w.expired(Timestamp(T0 + 60_000)));

    let listed = store.list_tokens().await.expect("list");
    let ids: Vec<(Role, &str)> = listed.iter().map(|t| (t.role, t.scope.as_str())).collect();
    assert_eq!(ids, vec![(Role::Admin, "*"), (Role::Worker, "pay")]);
    assert!(listed[0].id < listed[1].id, "oldest first");

    store
        .touch_token(w.id, Timestamp(T0 + 5))
        .await
        .expect("touch");
    let w2 = store
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .expect("token exists");
    assert_eq!(w2.last_used_at, Some(Timestamp(T0 + 5)));

    assert!(store
        .revoke_token(w.id, at.plus_ms(10))
        .await
        .expect("revoke"));
    assert!(store
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .is_none());
    let listed = store.list_tokens().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].role, Role::Admin);
    // A second revoke and an unknown id change nothing.
    assert!(!store
        .revoke_token(w.id, at.plus_ms(11))
        .await
        .expect("revoke"));
    assert!(!store.revoke_token(i64::MAX, at).await.expect("revoke"));
    // A revoked token still counts: revoking never switches auth off.
    assert_eq!(store.token_count().await.expect("count"), 2);
    // Revocation is durable: a fresh handle sees it too.
    let again = b.open().await;
    assert!(again
        .find_token(&hash_secret("idem_w"))
        .await
        .expect("find")
        .is_none());
    assert_eq!(again.list_tokens().await.expect("list").len(), 1);
}
