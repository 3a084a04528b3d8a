//! Contract cases of the actions table, run against every backend by
//! [`crate::action_suite!`] like [`crate::contract_suite!`] runs the ledger cases: an action
//! is created then replaced (`created` says which), read back from another handle, listed per
//! namespace in name order, its header values kept as one secret written and removed with it,
//! and a delete says whether there was one.

use std::sync::Arc;

use idem_store::{action_owner, ActionWrite, Secret, SecretKind};

use crate::contract::{Backend, H};

/// Writes `w` through `h`'s store at its time: whether that created the action.
async fn put(h: &H, w: ActionWrite) -> bool {
    h.store.action_put(w, h.now()).await.expect("put")
}

/// Expands to one `#[tokio::test]` per action case for backend type `$backend`.
#[macro_export]
macro_rules! action_suite {
    ($backend:ty) => {
        $crate::action_suite!(@cases $backend;
            actions_are_stored_per_namespace_with_their_header_values_apart,
        );
    };
    (@cases $backend:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::contract::run::<$backend, _, _>(
                    stringify!($case),
                    |b| $crate::contract::action_cases::$case(b),
                )
                .await;
            }
        )*
    };
}

fn write(ns: &str, name: &str, config: &str, headers: Option<&str>) -> ActionWrite {
    ActionWrite {
        namespace: ns.to_owned(),
        name: name.to_owned(),
        config: config.to_owned(),
        headers: headers.map(Secret::new),
    }
}

pub async fn actions_are_stored_per_namespace_with_their_header_values_apart<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "shop").await;
    let store = &h.store;
    let other = b.open().await;
    let created = put(
        &h,
        write("shop", "send", r#"{"v":1}"#, Some(r#"{"a":"s3cr3t"}"#)),
    )
    .await;
    assert!(created, "the first write creates");
    assert!(!format!("{:?}", write("shop", "send", "{}", Some("s3cr3t"))).contains("s3cr3t"));
    h.advance(1_000);
    let replaced = put(
        &h,
        write("shop", "send", r#"{"v":2}"#, Some(r#"{"a":"n3w"}"#)),
    )
    .await;
    assert!(!replaced, "the second write replaces");
    put(&h, write("shop", "alpha", r#"{"v":3}"#, None)).await;
    put(&h, write("other", "send", r#"{"v":4}"#, None)).await;

    let got = other
        .action_get("shop", "send")
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(got.config, r#"{"v":2}"#);
    assert!(got.updated_at.0 > got.created_at.0, "{got:?}");
    assert!(other
        .action_get("shop", "nope")
        .await
        .expect("get")
        .is_none());
    let names: Vec<String> = other
        .action_list("shop")
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["alpha", "send"], "one namespace, in name order");

    // The header values: one version, replaced with the action, none for an action without.
    let owner = action_owner("shop", "send");
    assert_eq!(owner.kind, SecretKind::ActionHeaders);
    let secrets = other.secrets(&owner, h.now()).await.expect("secrets");
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0].value.expose(), r#"{"a":"n3w"}"#);
    let none = other
        .secrets(&action_owner("shop", "alpha"), h.now())
        .await
        .expect("secrets");
    assert!(none.is_empty());
    put(&h, write("shop", "send", r#"{"v":5}"#, None)).await;
    assert!(other
        .secrets(&owner, h.now())
        .await
        .expect("secrets")
        .is_empty());

    assert!(store.action_delete("shop", "alpha").await.expect("delete"));
    assert!(!store.action_delete("shop", "alpha").await.expect("delete"));
    assert!(other
        .action_get("shop", "alpha")
        .await
        .expect("get")
        .is_none());
    assert_eq!(other.action_list("other").await.expect("list").len(), 1);
}
