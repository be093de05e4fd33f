//! `[model]`: which OpenAI-compatible endpoint and model to talk to, and [`ResolvedModel`],
//! the same checked for use.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::mask::mask_secret;

/// `[model]`: which OpenAI-compatible endpoint and model to talk to.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub name: Option<String>,
    pub timeout_secs: u64,
    pub max_retries: u32,
    pub stream: bool,
    /// The model's context window in tokens. Unset: what the server reports (`/v1/models`
    /// metadata, llama.cpp's `/props`), else 128,000.
    pub context_length: Option<u64>,
    /// Whether the model accepts images: the images tools produce are then sent to it, not
    /// only described. Unset: what the server reports (OpenRouter's `/v1/models`
    /// `architecture.input_modalities`, llama.cpp's `/props` `modalities.vision`), else no.
    pub vision: Option<bool>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            base_url: None,
            api_key: None,
            name: None,
            timeout_secs: 120,
            max_retries: 3,
            stream: true,
            context_length: None,
            vision: None,
        }
    }
}

// Hand-written so the API key never ends up in logs or panic messages.
impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_deref().map(mask_secret))
            .field("name", &self.name)
            .field("timeout_secs", &self.timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .field("context_length", &self.context_length)
            .field("vision", &self.vision)
            .finish()
    }
}

/// Model settings checked for use.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// Without a trailing slash.
    pub base_url: String,
    pub api_key: Option<String>,
    pub name: String,
    pub timeout_secs: u64,
    pub max_retries: u32,
    pub stream: bool,
    /// `[model] context_length`: the window as configured, when it is.
    pub context_length: Option<u64>,
    /// `[model] vision`: whether the model accepts images, when configured.
    pub vision: Option<bool>,
}

// Hand-written so the API key never ends up in logs or panic messages.
impl fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_deref().map(mask_secret))
            .field("name", &self.name)
            .field("timeout_secs", &self.timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .field("context_length", &self.context_length)
            .field("vision", &self.vision)
            .finish()
    }
}

impl ModelConfig {
    /// Checks that an endpoint and a name are configured; the error points at `config_path`.
    pub(crate) fn resolve(&self, config_path: &Path) -> Result<ResolvedModel, ConfigError> {
        let m = self;
        let base_url = non_empty(m.base_url.as_deref()).map(|u| u.trim_end_matches('/'));
        let name = non_empty(m.name.as_deref());
        match (base_url, name) {
            (Some(base_url), Some(name)) => Ok(ResolvedModel {
                base_url: base_url.to_owned(),
                api_key: non_empty(m.api_key.as_deref()).map(str::to_owned),
                name: name.to_owned(),
                timeout_secs: m.timeout_secs,
                max_retries: m.max_retries,
                stream: m.stream,
                context_length: m.context_length,
                vision: m.vision,
            }),
            (base_url, name) => Err(ConfigError::ModelNotConfigured {
                missing_base_url: base_url.is_none(),
                missing_name: name.is_none(),
                config_path: config_path.to_owned(),
            }),
        }
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::{ConfigError, load};

    #[test]
    fn resolved_model_ok() {
        let (_d, home) = temp_home();
        let env = env_of(&[
            ("OPENAI_BASE_URL", "http://localhost:11434/v1/"),
            ("TERN_MODEL", "qwen"),
        ]);
        let eff = load(&home, &env).unwrap();
        let m = eff.resolved_model().unwrap();
        assert_eq!(m.base_url, "http://localhost:11434/v1");
        assert_eq!(m.name, "qwen");
        assert_eq!(m.api_key, None);
        assert_eq!(m.timeout_secs, 120);
        assert_eq!(m.max_retries, 3);
        assert!(m.stream);
        assert_eq!(eff.config.resolved_model(&home).unwrap(), m);
    }

    #[test]
    fn missing_model_names_both_variables() {
        let (_d, home) = temp_home();
        let eff = load(&home, &no_env).unwrap();
        let msg = eff.resolved_model().unwrap_err().to_string();
        let path = home.config_path().display().to_string();
        assert_eq!(
            msg,
            format!(
                "no model is configured: set OPENAI_BASE_URL (the OpenAI-compatible endpoint, \
                 e.g. http://localhost:11434/v1) and TERN_MODEL (the model name), \
                 or set [model] base_url and name in {path}"
            )
        );
    }

    #[test]
    fn missing_model_names_only_the_name() {
        let (_d, home) = temp_home();
        // An API key alone yields the OpenAI base URL, so only the name is missing.
        let eff = load(&home, &env_of(&[("OPENAI_API_KEY", "sk-x")])).unwrap();
        let msg = eff.resolved_model().unwrap_err().to_string();
        assert!(msg.contains("TERN_MODEL"), "{msg}");
        assert!(!msg.contains("OPENAI_BASE_URL"), "{msg}");
        assert!(msg.contains("[model] name in"), "{msg}");
        assert!(!msg.contains("base_url"), "{msg}");
    }

    #[test]
    fn missing_model_names_only_the_base_url() {
        let (_d, home) = temp_home();
        let eff = load(&home, &env_of(&[("TERN_MODEL", "m")])).unwrap();
        let err = eff.resolved_model().unwrap_err();
        assert!(matches!(
            err,
            ConfigError::ModelNotConfigured {
                missing_base_url: true,
                missing_name: false,
                ..
            }
        ));
        let msg = err.to_string();
        assert!(msg.contains("OPENAI_BASE_URL"), "{msg}");
        assert!(!msg.contains("TERN_MODEL"), "{msg}");
        assert!(msg.contains("[model] base_url in"), "{msg}");
        assert!(
            msg.contains(&home.config_path().display().to_string()),
            "{msg}"
        );
    }

    #[test]
    fn debug_does_not_leak_api_key() {
        let model = ModelConfig {
            api_key: Some("sk-supersecretvalue9876".to_owned()),
            ..ModelConfig::default()
        };
        let dbg = format!("{model:?}");
        assert!(!dbg.contains("supersecret"), "{dbg}");
        assert!(dbg.contains("sk-…9876"), "{dbg}");
    }
}
