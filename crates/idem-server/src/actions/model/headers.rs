//! The header values of an action's delivery, kept apart from its document: their stored
//! (secret) form and the hints a listing may show.
//!
//! It owns the values and must never print one: `Debug` shows the header names only, and a
//! hint is at most the last characters a secret's own hint gives. It imports nothing from the
//! rest of the action model.

use serde_json::{json, Map, Value};

/// The header values of a delivery (`deliver.http.headers`, `deliver.http.reconcile.headers`,
/// `deliver.mcp.headers`), kept apart from the document.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    pub request: Map<String, Value>,
    pub reconcile: Map<String, Value>,
}

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&String> = self.request.keys().chain(self.reconcile.keys()).collect();
        write!(f, "Headers({names:?})")
    }
}

impl Headers {
    pub fn is_empty(&self) -> bool {
        self.request.is_empty() && self.reconcile.is_empty()
    }

    /// The stored form (a secret's value).
    pub fn to_secret_text(&self) -> String {
        json!({"request": self.request, "reconcile": self.reconcile}).to_string()
    }

    /// Reads the stored form back (a damaged value reads as no headers).
    pub fn from_secret_text(s: &str) -> Headers {
        let v: Value = serde_json::from_str(s).unwrap_or(Value::Null);
        let part = |n: &str| {
            v.get(n)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        Headers {
            request: part("request"),
            reconcile: part("reconcile"),
        }
    }

    /// Header name → hint (the last 4 characters of a value longer than 8).
    pub fn hints(m: &Map<String, Value>) -> Value {
        Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let s = v.as_str().unwrap_or_default();
                    (k.clone(), json!(idem::Secret::new(s).hint()))
                })
                .collect(),
        )
    }
}
