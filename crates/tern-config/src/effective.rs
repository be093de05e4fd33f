//! [`Effective`]: the configuration in force after every layer, with where each value came
//! from ([`Source`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::Config;
use crate::error::ConfigError;
use crate::model::ResolvedModel;

/// Where an effective value came from, for `tern config show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File,
    Env(&'static str),
    Flag,
}

/// The configuration in force after all layers are applied.
#[derive(Debug, Clone)]
pub struct Effective {
    pub config: Config,
    /// Where each key came from, by dotted name (`"model.base_url"`, `"sandbox.env.keep"`):
    /// every key of the configuration but tables and arrays of tables, whose entries only
    /// ever come from the file.
    pub sources: BTreeMap<String, Source>,
    /// Whether `config.toml` existed.
    pub file_found: bool,
    /// The `config.toml` that was (or would have been) read; error messages
    /// point users at it.
    pub config_path: PathBuf,
}

impl Effective {
    /// Applies the `--model` flag, which beats every other layer. An empty
    /// name is ignored, as empty environment values are.
    pub fn set_model_flag(&mut self, name: String) {
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        self.config.model.name = Some(name.to_owned());
        self.sources.insert("model.name".to_owned(), Source::Flag);
    }

    /// [`Config::resolved_model`] with the path this configuration was loaded from.
    pub fn resolved_model(&self) -> Result<ResolvedModel, ConfigError> {
        self.config.resolved_model_at(&self.config_path)
    }

    /// Where `key` came from; `Default` for keys not recorded.
    pub fn source(&self, key: &str) -> Source {
        self.sources.get(key).cloned().unwrap_or(Source::Default)
    }
}
