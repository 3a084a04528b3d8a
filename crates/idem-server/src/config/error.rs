//! Why a configuration was refused: the setting and, for the file layer, the file it came
//! from.
//!
//! It owns the error type only and must never carry a setting's value that may be secret
//! (the database URL, an alert secret, a header value) into its message.

use std::path::{Path, PathBuf};

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("invalid setting {setting}: {message}")]
    Setting { setting: String, message: String },
    #[error("in config file {path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    pub(super) fn in_file(self, path: &Path) -> ConfigError {
        ConfigError::InFile {
            path: path.to_owned(),
            source: Box::new(self),
        }
    }
}
