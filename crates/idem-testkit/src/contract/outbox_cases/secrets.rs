//! The secrets store: versions rotate with a grace period, each owner sees only its own,
//! removal takes every version, and a value never shows in `Debug`.
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::sync::Arc;

use idem_store::{NewSecret, Secret, SecretKind, SecretOwner};

use crate::contract::{Backend, H};

// ================================================================ secrets

pub async fn secrets_rotate_with_a_grace_period_and_never_show_in_debug<B: Backend>(b: Arc<B>) {
    const S1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const S3: &str = "whsec_c2Vjb25kLXNlY3JldC1mb3ItdGhlLXRlc3Q=";
    let h = H::new(&*b, "ns").await;
    let other = b.open().await;
    let stripe = SecretOwner::new(SecretKind::Source, "stripe");
    let values = |list: &[idem_store::StoredSecret]| {
        list.iter()
            .map(|s| s.value.expose().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(h
        .store
        .secrets(&stripe, h.now())
        .await
        .expect("read")
        .is_empty());
    h.store
        .secret_add(NewSecret::new(stripe.clone(), Secret::new(S1)), h.now())
        .await
        .expect("add");
    h.advance(1_000);
    // Rotation: the new secret signs from now, the old one verifies for 10 more minutes.
    let grace_end = h.now().plus_ms(600_000);
    h.store
        .secret_add(
            NewSecret {
                others_expire_at: Some(grace_end),
                ..NewSecret::new(stripe.clone(), Secret::new(S2))
            },
            h.now(),
        )
        .await
        .expect("rotate");
    let both = other.secrets(&stripe, h.now()).await.expect("read");
    assert_eq!(
        values(&both),
        [S2, S1],
        "newest first, seen by another handle"
    );
    assert_eq!(both[1].expires_at, Some(grace_end));
    assert_eq!(both[0].expires_at, None);
    let shown = format!("{both:?}");
    for s in [S1, S2] {
        assert!(!shown.contains(&s[6..14]), "Debug shows a secret: {shown}");
    }
    assert!(shown.contains("[redacted]"), "{shown}");
    h.clock.advance_ms(599_999);
    assert_eq!(
        values(&h.store.secrets(&stripe, h.now()).await.expect("read")),
        [S2, S1]
    );
    h.advance(1);
    assert_eq!(
        values(&h.store.secrets(&stripe, h.now()).await.expect("read")),
        [S2]
    );

    // Owners are apart: another kind or name of the same text sees nothing of these.
    let alert = SecretOwner::new(SecretKind::Alert, "stripe");
    h.store
        .secret_add(NewSecret::new(alert.clone(), Secret::new(S3)), h.now())
        .await
        .expect("add");
    // Replacement without grace: the others stop at once.
    h.store
        .secret_add(
            NewSecret {
                others_expire_at: Some(h.now()),
                ..NewSecret::new(stripe.clone(), Secret::new(S3))
            },
            h.now(),
        )
        .await
        .expect("replace");
    assert_eq!(
        values(&h.store.secrets(&stripe, h.now()).await.expect("read")),
        [S3]
    );
    assert_eq!(
        values(&h.store.secrets(&alert, h.now()).await.expect("read")),
        [S3]
    );
    // A version with its own expiry.
    let temp = SecretOwner::new(SecretKind::Forward, "stripe");
    h.store
        .secret_add(
            NewSecret {
                expires_at: Some(h.now().plus_ms(5)),
                ..NewSecret::new(temp.clone(), Secret::new(S1))
            },
            h.now(),
        )
        .await
        .expect("add");
    assert_eq!(
        values(&h.store.secrets(&temp, h.now()).await.expect("read")),
        [S1]
    );
    h.advance(5);
    assert!(h
        .store
        .secrets(&temp, h.now())
        .await
        .expect("read")
        .is_empty());

    assert_eq!(h.store.secrets_remove(&stripe).await.expect("remove"), 3);
    assert!(other
        .secrets(&stripe, h.now())
        .await
        .expect("read")
        .is_empty());
    assert_eq!(
        values(&other.secrets(&alert, h.now()).await.expect("read")),
        [S3]
    );
}
