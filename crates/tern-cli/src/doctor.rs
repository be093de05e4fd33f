//! `tern doctor`: checks the set-up and says in plain words what to fix.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tern_config::{ENV_API_KEY, ENV_BASE_URL, ENV_MODEL};
use tern_llm::LlmError;

use crate::context;

/// What to check when the endpoint has no such route: said by `tern doctor` and `tern chat`.
pub fn base_url_hint() -> String {
    format!("{ENV_BASE_URL} usually ends in /v1, e.g. http://localhost:11434/v1")
}

struct Report {
    failed: bool,
}

impl Report {
    fn ok(&self, what: &str) {
        println!("✓ {what}");
    }
    fn warn(&self, what: &str, fix: &str) {
        println!("! {what}\n    {fix}");
    }
    fn fail(&mut self, what: &str, fix: &str) {
        self.failed = true;
        println!("✗ {what}\n    fix: {fix}");
    }
}

pub async fn run(home: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let mut r = Report { failed: false };
    let home = match tern_config::Home::resolve(home, &context::env_var) {
        Ok(h) => h,
        Err(e) => {
            r.fail(
                &format!("home directory: {e}"),
                "set TERN_HOME to a writable directory",
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    match home.ensure() {
        Ok(()) => r.ok(&format!("home directory {}", home.root.display())),
        Err(e) => r.fail(
            &format!("home directory: {e}"),
            "set TERN_HOME to a writable directory",
        ),
    }

    let eff = match tern_config::load(&home, &context::env_var) {
        Ok(eff) => {
            if eff.file_found {
                r.ok(&format!("config file {}", home.config_path().display()));
            } else {
                r.ok(&format!(
                    "no config file at {} (defaults and environment apply)",
                    home.config_path().display()
                ));
            }
            Some(eff)
        }
        Err(e) => {
            r.fail(
                &format!("configuration: {e}"),
                "correct the value it names, then run `tern doctor` again",
            );
            None
        }
    };

    if let Some(eff) = &eff {
        let sandbox = context::sandbox(&home, eff);
        let policy = sandbox.policy();
        match (sandbox.check(), sandbox.support()) {
            (Err(e), _) => r.fail(
                &format!("sandbox: {e}"),
                "run tern on Linux 5.13 or later with Landlock enabled, or set [sandbox] mode = \"full-access\" knowing what it gives up",
            ),
            (Ok(()), support) if policy.mode == tern_sandbox::Mode::FullAccess => {
                let kernel = match support {
                    tern_sandbox::Support::Landlock { abi } => format!("Landlock ABI {abi} is available but unused"),
                    tern_sandbox::Support::Missing { reason } => reason.clone(),
                };
                r.warn(
                    &format!("sandbox: full-access, no sandbox ({kernel})"),
                    context::FULL_ACCESS_WARNING,
                );
            }
            (Ok(()), support) => {
                let abi = match support {
                    tern_sandbox::Support::Landlock { abi } => *abi,
                    tern_sandbox::Support::Missing { .. } => 0,
                };
                let line = format!(
                    "sandbox: {} (Landlock ABI {abi}); {} and the protected paths are out of reach",
                    policy.describe(),
                    home.root.display()
                );
                match support.limits() {
                    Some(gaps) => r.warn(&line, &format!("partly enforced on this kernel: {gaps}")),
                    None => r.ok(&line),
                }
            }
        }
    }

    match context::open_store(&home).await {
        Ok(store) => match (
            store.integrity_problem().await,
            store.list_sessions(1_000_000, 0).await,
        ) {
            (Ok(None), Ok(list)) => r.ok(&format!(
                "session store {} ({} sessions)",
                home.db_path().display(),
                list.len()
            )),
            (Ok(Some(p)), _) => r.fail(
                &format!("session store {} is damaged: {p}", home.db_path().display()),
                "restore it from a backup, or move it away to start a new store",
            ),
            (Err(e), _) | (_, Err(e)) => r.fail(
                &format!("session store: {e}"),
                "check the file's permissions and free disk space",
            ),
        },
        Err(e) => r.fail(
            &format!("{e:#}"),
            "check the directory's permissions and free disk space",
        ),
    }

    let Some(eff) = eff else {
        return Ok(ExitCode::FAILURE);
    };
    let model = match eff.resolved_model() {
        Ok(m) => m,
        Err(e) => {
            r.fail("no model is configured", &format!("{e}"));
            return Ok(ExitCode::FAILURE);
        }
    };
    r.ok(&format!("model {} at {}", model.name, model.base_url));
    if model.api_key.is_none() {
        r.warn(
            "no API key is set",
            &format!("fine for local servers (Ollama, llama.cpp, vLLM); hosted endpoints need {ENV_API_KEY}"),
        );
    }
    let mut cfg = tern_llm::ClientConfig::new(model.base_url.clone());
    cfg.api_key = model.api_key.clone();
    cfg.timeout = Duration::from_secs(model.timeout_secs.min(15));
    let client = tern_llm::Client::new(cfg)?;
    match client.list_models().await {
        Ok(ids) => {
            r.ok(&format!(
                "endpoint {} answers GET /models ({} models)",
                model.base_url,
                ids.len()
            ));
            if !ids.is_empty() && !ids.contains(&model.name) {
                let shown: Vec<_> = ids.iter().take(8).map(String::as_str).collect();
                r.warn(
                    &format!(
                        "model {} is not among the models the endpoint lists",
                        model.name
                    ),
                    &format!(
                        "it lists: {}{}; check {ENV_MODEL}",
                        shown.join(", "),
                        if ids.len() > 8 { ", …" } else { "" }
                    ),
                );
            }
        }
        Err(LlmError::Http {
            status: 401 | 403, ..
        }) => r.fail(
            &format!("the endpoint {} refused the API key", model.base_url),
            &format!("check {ENV_API_KEY} (or [model] api_key in config.toml)"),
        ),
        Err(LlmError::Http { status: 404, .. }) => r.fail(
            &format!(
                "the endpoint {} has no /models: is this the API's base URL?",
                model.base_url
            ),
            &base_url_hint(),
        ),
        Err(e @ (LlmError::Connect { .. } | LlmError::Timeout { .. })) => r.fail(
            &format!("cannot reach the model endpoint: {e}"),
            &format!("start the model server, or correct {ENV_BASE_URL}"),
        ),
        Err(e) => r.fail(
            &format!("the model endpoint: {e}"),
            &format!("check {ENV_BASE_URL} and the server's logs"),
        ),
    }
    if !r.failed {
        let (tokens, source) =
            tern_agent::window::resolve(model.context_length, &client, &model.name).await;
        let threshold = eff.config.compaction.threshold_percent;
        let what = format!(
            "context window {tokens} tokens ({}); sessions compact at {threshold} % of it",
            source.describe()
        );
        if source == tern_agent::WindowSource::Default {
            r.warn(
                &what,
                "set [model] context_length to the window the server was started with (e.g. llama.cpp's -c)",
            );
        } else {
            r.ok(&what);
        }
    }
    if r.failed {
        println!("\nSome checks failed; fix them and run `tern doctor` again.");
        Ok(ExitCode::FAILURE)
    } else {
        println!("\nAll checks passed.");
        Ok(ExitCode::SUCCESS)
    }
}
