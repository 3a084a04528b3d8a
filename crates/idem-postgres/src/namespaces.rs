//! Namespace settings: reading them with the per-state counts, and applying a policy patch
//! or the pause switch under a row lock (concurrent patches merge one after the other).
//!
//! A change bumps the row's `revision`, which every cached decision of every instance checks.

use crate::conn::Conn as Client;
use idem_core::{Namespace, Policy, Timestamp};
use idem_store::{
    AlertSecretWrite, NamespaceChange, NamespaceInfo, SecretKind, StateCounts, StoreError,
};

use crate::error::{store_err, PgError};
use crate::rows::{as_u64, parse_state, policy_from_text, policy_text};
use crate::secrets::{alert_secret_of, write_alert_secret, ALERT_SECRET};
use crate::{corrupt, PgStore};

impl PgStore {
    pub(crate) async fn namespace_info(
        &self,
        client: &Client,
        ns: &Namespace,
    ) -> Result<NamespaceInfo, PgError> {
        let ns_stmt = client
            .prepare_cached("SELECT policy, paused FROM namespaces WHERE namespace = $1")
            .await?;
        let counts_stmt = client
            .prepare_cached(
                "SELECT state, sum(n)::BIGINT FROM namespace_counts WHERE namespace = $1 \
                 GROUP BY state HAVING sum(n) <> 0",
            )
            .await?;
        let secret_stmt = client.prepare_cached(ALERT_SECRET).await?;
        let ns_str = ns.as_str();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&ns_str];
        let alert = SecretKind::Alert.as_str();
        let secret_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&alert, &ns_str];
        let (ns_row, count_rows, secret_row) = tokio::try_join!(
            client.query_opt(&ns_stmt, &params),
            client.query(&counts_stmt, &params),
            client.query_opt(&secret_stmt, &secret_params)
        )?;
        let (mut policy, paused) = match ns_row {
            Some(r) => {
                let text: String = r.try_get(0).map_err(|e| corrupt(&e))?;
                (
                    policy_from_text(Some(&text))?,
                    r.try_get(1).map_err(|e| corrupt(&e))?,
                )
            }
            None => (Policy::default(), false),
        };
        let secret = secret_row.map(|r| r.try_get(0)).transpose();
        policy.alert_secret = alert_secret_of(secret.map_err(|e| corrupt(&e))?)?;
        let mut pairs = Vec::with_capacity(count_rows.len());
        for r in count_rows {
            let s: String = r.try_get(0).map_err(|e| corrupt(&e))?;
            let n: i64 = r.try_get(1).map_err(|e| corrupt(&e))?;
            pairs.push((parse_state(&s)?, as_u64(n)));
        }
        Ok(NamespaceInfo {
            namespace: ns.as_str().to_owned(),
            paused,
            policy,
            counts: StateCounts::from_pairs(pairs),
        })
    }

    pub(crate) async fn update_namespace_once(
        &self,
        ns: &Namespace,
        change: &NamespaceChange,
        now: Timestamp,
    ) -> Result<(), PgError> {
        let mut client = self.client().await?;
        let default_text = policy_text(&Policy::default())?;
        let d = Policy::default();
        let tx = client.transaction().await?;
        // Make sure the row exists, then lock it: concurrent patches merge one after the other.
        tx.execute(
            "INSERT INTO namespaces \
             (namespace, policy, paused, retention_ms, audit_retention_ms, stuck_after_ms, \
              updated_at) VALUES ($1, $2, FALSE, $3, $4, $5, $6) \
             ON CONFLICT (namespace) DO NOTHING",
            &[
                &ns.as_str(),
                &default_text,
                &d.retention_ms,
                &d.audit_retention_ms,
                &d.stuck_after_ms,
                &now.0,
            ],
        )
        .await?;
        let row = tx
            .query_one(
                "SELECT policy, paused FROM namespaces WHERE namespace = $1 FOR UPDATE",
                &[&ns.as_str()],
            )
            .await?;
        let text: String = row.try_get(0).map_err(|e| corrupt(&e))?;
        let mut paused: bool = row.try_get(1).map_err(|e| corrupt(&e))?;
        let secret = tx
            .query_opt(ALERT_SECRET, &[&SecretKind::Alert.as_str(), &ns.as_str()])
            .await?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| corrupt(&e))?;
        let before = Policy {
            alert_secret: alert_secret_of(secret)?,
            ..policy_from_text(Some(&text))?
        };
        let policy = match change {
            NamespaceChange::Patch(p) => before.patch(p).map_err(StoreError::from)?,
            NamespaceChange::Pause | NamespaceChange::Resume => {
                paused = matches!(change, NamespaceChange::Pause);
                before.clone()
            }
        };
        tx.execute(
            "UPDATE namespaces SET policy = $2, paused = $3, retention_ms = $4, \
             audit_retention_ms = $5, stuck_after_ms = $6, updated_at = $7, \
             revision = revision + 1 WHERE namespace = $1",
            &[
                &ns.as_str(),
                &policy_text(&policy)?,
                &paused,
                &policy.retention_ms,
                &policy.audit_retention_ms,
                &policy.stuck_after_ms,
                &now.0,
            ],
        )
        .await?;
        let write =
            AlertSecretWrite::between(before.alert_secret.as_ref(), policy.alert_secret.as_ref());
        write_alert_secret(&tx, ns.as_str(), write, now).await?;
        tx.commit().await?;
        Ok(())
    }
}

impl PgStore {
    pub(crate) async fn namespace_read(&self, ns: &Namespace) -> Result<NamespaceInfo, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            self.namespace_info(&client, ns).await.map_err(store_err)
        })
        .await
    }

    pub(crate) async fn namespace_update(
        &self,
        ns: &Namespace,
        change: NamespaceChange,
        now: Timestamp,
    ) -> Result<NamespaceInfo, StoreError> {
        self.bounded(async {
            let changed = self
                .with_retries("update_namespace", || {
                    self.update_namespace_once(ns, &change, now)
                })
                .await;
            // Other instances learn of the change from their guards; this one at once.
            self.ns_cache.remove(ns);
            changed?;
            let client = self.client().await.map_err(store_err)?;
            self.namespace_info(&client, ns).await.map_err(store_err)
        })
        .await
    }
}
