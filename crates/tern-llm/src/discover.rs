//! [`Client::context_length`]: the model's context window as the server reports it.
//!
//! Servers say it in different places; each is asked in turn, the first answer wins:
//! 1. `GET {base}/models`, the model's entry: `context_length` (OpenRouter, also under
//!    `top_provider`), `max_model_len` (vLLM);
//! 2. `GET {root}/props` (llama.cpp): `default_generation_settings.n_ctx`, or `n_ctx` — the
//!    window the server allocated, which is what a prompt must fit; only then the
//!    `meta.n_ctx_train` of llama.cpp's `/models` entry, what the model was trained for and
//!    often more than the server gave it;
//! 3. `POST {root}/api/show` (Ollama): a `num_ctx` set in the model's parameters, else
//!    `model_info.<architecture>.context_length`.
//!
//! `{root}` is the base URL without its trailing `/v1`. Best effort: the whole lookup is
//! bounded by `discovery_timeout`, and a failure is logged at debug and means "unknown".
//!
//! [`Client::accepts_images`] asks the same places whether the model takes images: the
//! `/models` entry's `architecture.input_modalities` (OpenRouter), then llama.cpp's `/props`
//! `modalities.vision` (true when the server was started with a multimodal projector).

use serde_json::{Value, json};

use crate::Client;

impl Client {
    /// The context window of `model` in tokens, as the server says, or `None` when it does
    /// not say (or cannot be reached in time). Never an error: the caller falls back to a
    /// configured or default window.
    pub async fn context_length(&self, model: &str) -> Option<u64> {
        let bound = self.config().discovery_timeout;
        match tokio::time::timeout(bound, self.ask_context_length(model)).await {
            Ok(found) => found,
            Err(_) => {
                tracing::debug!(?bound, "context window lookup: no answer in time");
                None
            }
        }
    }

    /// Whether `model` accepts images as the server says, or `None` when it does not say (or
    /// cannot be reached in time). Never an error, like [`Client::context_length`].
    pub async fn accepts_images(&self, model: &str) -> Option<bool> {
        let bound = self.config().discovery_timeout;
        let ask = async {
            let entry = self.model_entry(model).await;
            if let Some(yes) = entry.as_ref().and_then(input_images) {
                return Some(yes);
            }
            let props = self
                .fetch_json(self.authed(self.http().get(self.root_url("props"))))
                .await?;
            props.get("modalities")?.get("vision")?.as_bool()
        };
        tokio::time::timeout(bound, ask).await.unwrap_or_else(|_| {
            tracing::debug!(?bound, "image support lookup: no answer in time");
            None
        })
    }

    async fn ask_context_length(&self, model: &str) -> Option<u64> {
        let entry = self.model_entry(model).await;
        if let Some(n) = entry.as_ref().and_then(served_window) {
            return Some(n);
        }
        if let Some(n) = self.props_window().await {
            return Some(n);
        }
        if let Some(n) = entry.as_ref().and_then(trained_window) {
            return Some(n);
        }
        self.ollama_window(model).await
    }

    /// The `/models` entry of `model`; the only entry of a server that lists one (llama.cpp
    /// serves one model whatever name the request gives, and lists it under its file name).
    async fn model_entry(&self, model: &str) -> Option<Value> {
        let v = self
            .fetch_json(self.authed(self.http().get(self.url("models"))))
            .await?;
        let data = v.get("data")?.as_array()?;
        data.iter()
            .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
            .or(match data.as_slice() {
                [only] => Some(only),
                _ => None,
            })
            .cloned()
    }

    async fn props_window(&self) -> Option<u64> {
        let v = self
            .fetch_json(self.authed(self.http().get(self.root_url("props"))))
            .await?;
        number(&v, &["default_generation_settings", "n_ctx"]).or_else(|| number(&v, &["n_ctx"]))
    }

    async fn ollama_window(&self, model: &str) -> Option<u64> {
        let req = self
            .http()
            .post(self.root_url("api/show"))
            .json(&json!({ "model": model }));
        let v = self.fetch_json(self.authed(req)).await?;
        // `parameters` is Modelfile text, one `name value` a line.
        let num_ctx = v
            .get("parameters")
            .and_then(Value::as_str)
            .and_then(|p| {
                p.lines()
                    .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                        ["num_ctx", n] => n.parse::<u64>().ok(),
                        _ => None,
                    })
            })
            .filter(|n| *n > 0);
        num_ctx.or_else(|| {
            let info = v.get("model_info")?;
            let arch = info.get("general.architecture")?.as_str()?;
            number(info, &[&format!("{arch}.context_length")])
        })
    }

    /// The JSON of a successful answer to `rb`; `None` (logged at debug) for anything else.
    async fn fetch_json(&self, rb: reqwest::RequestBuilder) -> Option<Value> {
        let resp = match rb.send().await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %crate::error_chain(&e), "context window lookup failed");
                return None;
            }
        };
        let url = resp.url().to_string();
        if !resp.status().is_success() {
            tracing::debug!(%url, status = %resp.status(), "context window lookup: no answer");
            return None;
        }
        match resp.json::<Value>().await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::debug!(%url, error = %crate::error_chain(&e), "context window lookup: not JSON");
                None
            }
        }
    }
}

/// The window a `/models` entry states for serving: OpenRouter's and vLLM's fields.
fn served_window(entry: &Value) -> Option<u64> {
    number(entry, &["context_length"])
        .or_else(|| number(entry, &["top_provider", "context_length"]))
        .or_else(|| number(entry, &["max_model_len"]))
}

/// OpenRouter's `/models` entry: whether `image` is among the model's input modalities.
fn input_images(entry: &Value) -> Option<bool> {
    let modalities = entry
        .get("architecture")?
        .get("input_modalities")?
        .as_array()?;
    Some(modalities.iter().any(|m| m.as_str() == Some("image")))
}

/// llama.cpp's `/models` entry: what the model was trained for.
fn trained_window(entry: &Value) -> Option<u64> {
    number(entry, &["meta", "n_ctx_train"])
}

/// A positive integer at `path` (some servers send it as a float or a string).
fn number(v: &Value, path: &[&str]) -> Option<u64> {
    let mut at = v;
    for key in path {
        at = at.get(*key)?;
    }
    let n = match at {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }?;
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_servers_field() {
        let openrouter =
            json!({"id": "a", "context_length": 131072, "top_provider": {"context_length": 65536}});
        assert_eq!(served_window(&openrouter), Some(131072));
        let nested = json!({"id": "a", "top_provider": {"context_length": 65536}});
        assert_eq!(served_window(&nested), Some(65536));
        let vllm = json!({"id": "a", "max_model_len": 32768});
        assert_eq!(served_window(&vllm), Some(32768));
        let llama = json!({"id": "a", "meta": {"n_ctx_train": 40960.0}});
        assert_eq!(served_window(&llama), None);
        assert_eq!(trained_window(&llama), Some(40960));
        assert_eq!(number(&json!({"n": "8192"}), &["n"]), Some(8192));
        assert_eq!(number(&json!({"n": 0}), &["n"]), None);
        assert_eq!(number(&json!({"n": null}), &["n"]), None);
    }

    #[test]
    fn reads_input_modalities() {
        let vision = json!({"id": "a", "architecture": {"input_modalities": ["text", "image"]}});
        assert_eq!(input_images(&vision), Some(true));
        let text = json!({"id": "a", "architecture": {"input_modalities": ["text"]}});
        assert_eq!(input_images(&text), Some(false));
        assert_eq!(input_images(&json!({"id": "a"})), None);
    }
}
