//! What stores keep for actions (`ACTIONS.md`): a namespace's tools, one row per
//! `(namespace, name)` with the action document as JSON text, and the header values of its
//! delivery as one secret ([`SecretKind::ActionHeaders`], a JSON object of header → value)
//! written in the same transaction. The document never holds a header value, so the
//! configuration column that backups and support queries read as plain text holds no
//! credential. This module owns those types; it must never print a header value (`Debug` of
//! [`ActionWrite`] shows only whether headers are given).

use idem_core::Timestamp;

use crate::secrets::{Secret, SecretKind, SecretOwner};

/// The owner of an action's header values. An action name never holds `/`, so the name
/// after the last `/` is the action whatever the namespace is.
pub fn action_owner(namespace: &str, name: &str) -> SecretOwner {
    SecretOwner::new(SecretKind::ActionHeaders, format!("{namespace}/{name}"))
}

/// A stored action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRow {
    pub namespace: String,
    pub name: String,
    /// The action document as JSON text (header values left out).
    pub config: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// An action to create or replace, with its header values, in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionWrite {
    pub namespace: String,
    pub name: String,
    pub config: String,
    /// The header values as a JSON object text; `None`: the action has none (any stored
    /// version is removed).
    pub headers: Option<Secret>,
}
