//! PostgreSQL backend (scaffold: being written).
use idem_store::StoreError;

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PgStore;

impl PgStore {
    /// Connects a pool to `url` and runs migrations.
    pub async fn connect(_url: &str) -> Result<PgStore, StoreError> {
        Err(StoreError::Internal(
            "postgres backend not built yet".into(),
        ))
    }
}

// Scaffold only: every call fails until the real backend replaces this file.
#[async_trait::async_trait]
impl idem_store::Store for PgStore {
    fn backend(&self) -> &'static str {
        "scaffold"
    }
    async fn execute(
        &self,
        _: &idem_core::Namespace,
        _: &idem_core::Key,
        _: idem_core::Op,
        _: idem_store::ExecCtx,
    ) -> Result<idem_store::Executed, StoreError> {
        Err(nb())
    }
    async fn get(
        &self,
        _: &idem_core::Namespace,
        _: &idem_core::Key,
    ) -> Result<Option<idem_store::RecordWithEvents>, StoreError> {
        Err(nb())
    }
    async fn list(
        &self,
        _: &idem_core::Namespace,
        _: &idem_store::ListQuery,
    ) -> Result<idem_store::Page, StoreError> {
        Err(nb())
    }
    async fn namespace(
        &self,
        _: &idem_core::Namespace,
    ) -> Result<idem_store::NamespaceInfo, StoreError> {
        Err(nb())
    }
    async fn update_namespace(
        &self,
        _: &idem_core::Namespace,
        _: idem_store::NamespaceChange,
        _: idem_core::Timestamp,
    ) -> Result<idem_store::NamespaceInfo, StoreError> {
        Err(nb())
    }
    async fn sweep_once(
        &self,
        _: idem_core::Timestamp,
        _: usize,
    ) -> Result<idem_store::SweepReport, StoreError> {
        Err(nb())
    }
    async fn retention_once(
        &self,
        _: idem_core::Timestamp,
        _: usize,
    ) -> Result<idem_store::RetentionReport, StoreError> {
        Err(nb())
    }
    async fn stats(&self, _: idem_core::Timestamp) -> Result<idem_store::Stats, StoreError> {
        Err(nb())
    }
    async fn due_alerts(
        &self,
        _: idem_core::Timestamp,
        _: usize,
        _: i64,
    ) -> Result<Vec<idem_store::PendingAlert>, StoreError> {
        Err(nb())
    }
    async fn finish_alert(
        &self,
        _: i64,
        _: idem_store::AlertOutcome,
        _: idem_core::Timestamp,
    ) -> Result<(), StoreError> {
        Err(nb())
    }
    async fn create_token(
        &self,
        _: idem_store::NewApiToken,
        _: idem_core::Timestamp,
    ) -> Result<(), StoreError> {
        Err(nb())
    }
    async fn find_token(&self, _: &str) -> Result<Option<idem_store::ApiToken>, StoreError> {
        Err(nb())
    }
    async fn token_count(&self) -> Result<u64, StoreError> {
        Err(nb())
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Err(nb())
    }
}

fn nb() -> StoreError {
    StoreError::Internal("backend not built yet".into())
}
