//! Alerts: the alert secret, exactly one alert per record, reason and attempt, the outbox
//! delivery lifecycle, and no alert without an `alert_url`.
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimRequest, Class, EventType, Policy, PolicyError, ResolveAction, State,
};
use idem_store::{AlertOutcome, NamespaceChange, PendingAlert, StoreError};
use serde_json::json;

use super::{count, fail, into_state, ok, resolve, sweep_all};
use crate::contract::{key, Backend, DAY_MS, H};

// ================================================================ alerts

/// The alerts due at the handle's time (at most 100, claimed for a minute).
async fn due_now(h: &H) -> Vec<PendingAlert> {
    h.store.due_alerts(h.now(), 100, 60_000).await.expect("due")
}

/// `alert_secret` is stored (both stores keep it in the secrets table), survives a pause, is seen
/// by another handle, reaches the alert sender with the URL at delivery time (so a rotated
/// secret signs the next delivery), and is cleared by null; a bad one changes nothing.
pub async fn alert_secret_is_stored_and_reaches_the_alert_sender<B: Backend>(b: Arc<B>) {
    const S1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let secret_of = |p: &Policy| p.alert_secret.as_ref().map(|s| s.expose().to_owned());
    let h = H::new(&*b, "ns").await;
    let info = h
        .patch(json!({"alert_url": "http://127.0.0.1:9/hook", "alert_secret": S1}))
        .await;
    assert_eq!(secret_of(&info.policy).as_deref(), Some(S1));
    let other = H::on(b.open().await, "ns", h.clock.clone());
    let seen = other.store.namespace(&h.ns).await.expect("ns").policy;
    assert_eq!(secret_of(&seen).as_deref(), Some(S1), "another handle");

    let k = key("k");
    let tok = h.acquire(&k).await;
    ok(&h, &k, fail(&tok, Class::Ambiguous)).await;
    let due = due_now(&h).await;
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].alert_secret.as_ref().map(|s| s.expose()), Some(S1));
    assert!(!format!("{due:?}").contains("MfKQ9r8G"), "Debug hides it");

    // Rotated: the next delivery of the same alert carries the new secret.
    h.patch(json!({"alert_secret": S2})).await;
    h.change(NamespaceChange::Pause).await;
    let paused = other.store.namespace(&h.ns).await.expect("ns").policy;
    assert_eq!(
        secret_of(&paused).as_deref(),
        Some(S2),
        "kept across a pause"
    );
    h.advance(60_001);
    let due = due_now(&other).await;
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].alert_secret.as_ref().map(|s| s.expose()), Some(S2));

    // A bad secret is refused naming the field and changes nothing.
    for bad in [
        json!("whsec_tooshort"),
        json!(12),
        json!(S1.trim_start_matches("whsec_")),
    ] {
        let r = h
            .store
            .update_namespace(
                &h.ns,
                NamespaceChange::Patch(json!({"alert_secret": bad})),
                h.now(),
            )
            .await;
        match r {
            Err(StoreError::Policy(PolicyError::InvalidField { field, .. })) => {
                assert_eq!(field, "alert_secret")
            }
            other => panic!("{bad}: {:?}", other.map(|i| i.policy)),
        }
        let now = other.store.namespace(&h.ns).await.expect("ns").policy;
        assert_eq!(secret_of(&now).as_deref(), Some(S2), "{bad}: unchanged");
    }

    // null clears it; later deliveries are unsigned.
    h.patch(json!({"alert_secret": null})).await;
    let cleared = other.store.namespace(&h.ns).await.expect("ns").policy;
    assert_eq!(cleared.alert_secret, None);
    assert_eq!(
        cleared.alert_url.as_deref(),
        Some("http://127.0.0.1:9/hook")
    );
    h.advance(60_001);
    let due = due_now(&other).await;
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].alert_secret, None);
}

pub async fn entering_review_queues_exactly_one_alert_per_record_reason_and_attempt<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    h.advance(30_000);
    sweep_all(&h.store, h.now()).await; // needs_review (lease expired), attempt 1
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::NeedsReview);
    // the holder's late ambiguous fail enters needs_review again at the same attempt
    let rec = ok(&h, &k, fail(&tok, Class::Ambiguous)).await;
    assert_eq!(rec.state, State::NeedsReview);
    let alerts = due_now(&h).await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(a.namespace, "ns");
    assert_eq!(a.key, "k");
    assert_eq!(a.reason, "needs_review");
    assert_eq!(a.state, State::NeedsReview);
    assert_eq!(a.attempt, 1);
    assert_eq!(a.alert_url.as_deref(), Some("http://127.0.0.1:9/hook"));
    // a later attempt that ends in review queues a new one
    ok(&h, &k, resolve(ResolveAction::Retry, "try again")).await;
    let tok = h.acquire(&k).await;
    ok(&h, &k, fail(&tok, Class::Ambiguous)).await;
    h.advance(60_001); // the first one's delivery claim has lapsed
    let alerts = due_now(&h).await;
    let mut attempts: Vec<u32> = alerts.iter().map(|a| a.attempt).collect();
    attempts.sort_unstable();
    assert_eq!(attempts, [1, 2], "{alerts:?}");
}

pub async fn alert_outbox_delivery_lifecycle<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    for name in ["a", "b", "c"] {
        into_state(&h, &key(name), State::NeedsReview, ClaimRequest::default()).await;
    }
    let now = h.now();
    let due = h.store.due_alerts(now, 100, 60_000).await.expect("due");
    assert_eq!(due.len(), 3);
    assert!(due
        .iter()
        .all(|a| a.tries == 0 && a.error_category.as_deref() == Some("http")));
    // claimed for 60 s: another sender does not get them
    assert!(h
        .store
        .due_alerts(now, 100, 60_000)
        .await
        .expect("due")
        .is_empty());
    let by_key: BTreeMap<String, i64> = due.iter().map(|a| (a.key.clone(), a.id)).collect();
    h.store
        .finish_alert(by_key["a"], AlertOutcome::Sent, now)
        .await
        .expect("finish");
    h.store
        .finish_alert(by_key["b"], AlertOutcome::RetryAt(now.plus_ms(5_000)), now)
        .await
        .expect("finish");
    h.store
        .finish_alert(by_key["c"], AlertOutcome::GaveUp, now)
        .await
        .expect("finish");
    let sent = h.get(&key("a")).await.events;
    assert_eq!(sent.last().map(|e| e.kind), Some(EventType::AlertSent));
    // The same words on every store: the reason after the shared prefix.
    let note = sent.last().and_then(|e| e.note.clone()).unwrap_or_default();
    assert!(
        note.starts_with(idem_store::sql::ALERT_SENT_NOTE)
            && note.len() > idem_store::sql::ALERT_SENT_NOTE.len(),
        "{note}"
    );
    assert_eq!(
        count(&h.get(&key("b")).await.events, EventType::AlertSent),
        0
    );
    assert!(h
        .store
        .due_alerts(now.plus_ms(4_999), 100, 60_000)
        .await
        .expect("due")
        .is_empty());
    let due = h
        .store
        .due_alerts(now.plus_ms(5_000), 100, 60_000)
        .await
        .expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].key, "b");
    assert_eq!(due[0].tries, 1);
    // sent and given-up alerts never come back
    let later = h
        .store
        .due_alerts(now.plus_ms(DAY_MS), 100, 60_000)
        .await
        .expect("due");
    let keys: HashSet<_> = later.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, HashSet::from(["b"]));
}

pub async fn no_alerts_are_queued_without_an_alert_url<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    let e = h.exec(&k, fail(&tok, Class::Ambiguous), None).await;
    assert!(e.reply.is_ok());
    assert_eq!(e.alerts_queued, 0);
    h.patch(json!({"alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    assert!(due_now(&h).await.is_empty());
    let k2 = key("k2");
    let tok = h.acquire(&k2).await;
    let e = h.exec(&k2, fail(&tok, Class::Ambiguous), None).await;
    assert_eq!(e.alerts_queued, 1);
}
