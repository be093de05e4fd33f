//! The HTTP client of a gateway's reviewer API (a bearer token, JSON answers, [`Failure`]s
//! that map to the exit codes) and `$TERN_HOME/inbox-admin.json`, where the gateway says
//! where it is. `tern ask` speaks the agent API through `tern_waits::pumpup` instead, and
//! shares [`Failure`] and [`AdminFile`] from here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tern_config::Home;

use super::show::print_json;
use super::{
    ConnArgs, EXIT_AUTH, EXIT_DECIDED, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_OTHER, EXIT_UNREACHABLE,
    EXIT_USAGE,
};
use crate::context;

/// `$TERN_HOME/inbox-admin.json`, written by the gateway at every start.
#[derive(Debug, Deserialize)]
pub(crate) struct AdminFile {
    pub url: String,
    pub token: Option<String>,
}

impl AdminFile {
    pub(crate) fn path(home: &Home) -> PathBuf {
        home.root.join(crate::reviewers::ADMIN_FILE)
    }

    /// `Ok(None)` when the file does not exist (no gateway has started here).
    pub(crate) async fn read(path: &Path) -> Result<Option<Self>, Failure> {
        match tokio::fs::read_to_string(path).await {
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
                Failure::Other(format!(
                    "{} is not what the gateway writes: {e}",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(Failure::Other(format!(
                    "no reviewer credentials: {} cannot be read ({e}). An agent's commands \
                     run in a sandbox that keeps tern's home out of reach, so they cannot \
                     decide requests; a human decides in the web inbox or with `tern inbox` \
                     in their own shell",
                    path.display()
                )))
            }
            Err(e) => Err(Failure::Other(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }
}

/// Same base URL, whatever the trailing slash.
pub(crate) fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// A response body as JSON: `None` when empty; text that is not JSON becomes `{"error"}`.
fn parse_body(bytes: &[u8]) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    Some(
        serde_json::from_slice(bytes)
            .unwrap_or_else(|_| json!({"error": String::from_utf8_lossy(bytes).trim().to_owned()})),
    )
}

/// An HTTP client for one gateway, with a bearer token.
pub(crate) struct Http {
    client: reqwest::Client,
    base: String,
    token: String,
}

/// A successful answer: its JSON body (`None` when empty, e.g. a 204).
pub(crate) struct Answer {
    pub body: Option<Value>,
}

/// Why a call or command failed; each maps to one exit code of [`EXIT_CODES`](super::EXIT_CODES).
#[derive(Debug)]
pub(crate) enum Failure {
    /// The gateway could not be reached (refused, reset, timed out).
    Unreachable(String),
    /// The gateway answered with an error status.
    Http {
        status: u16,
        body: Value,
    },
    /// 409 on a decision, explained.
    Conflict {
        message: String,
        body: Value,
    },
    /// Answers that do not fit the form, found before sending.
    Invalid(Vec<String>),
    NotFound(String),
    Usage(String),
    Other(String),
}

impl Failure {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Failure::Unreachable(_) => EXIT_UNREACHABLE,
            Failure::Http { status, body } => match status {
                401 | 403 => EXIT_AUTH,
                404 => EXIT_NOT_FOUND,
                409 => EXIT_DECIDED,
                400 if body["code"] == "invalid_answers" => EXIT_INVALID,
                _ => EXIT_OTHER,
            },
            Failure::Conflict { .. } => EXIT_DECIDED,
            Failure::Invalid(_) => EXIT_INVALID,
            Failure::NotFound(_) => EXIT_NOT_FOUND,
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Other(_) => EXIT_OTHER,
        }
    }

    /// The message for a person, on stderr; with `json` also a JSON object on stdout
    /// (`{"error", "status"?, "body"?}`) for scripts.
    pub(crate) fn report(&self, json: bool) {
        eprintln!("error: {}", self.message());
        if json {
            let mut out = json!({"error": self.message(), "exitCode": self.exit_code()});
            match self {
                Failure::Http { status, body } => {
                    out["status"] = json!(status);
                    out["body"] = body.clone();
                }
                Failure::Conflict { body, .. } => {
                    out["status"] = json!(409);
                    out["body"] = body.clone();
                }
                Failure::Invalid(errors) => out["errors"] = json!(errors),
                _ => {}
            }
            print_json(&out);
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            Failure::Unreachable(m)
            | Failure::Conflict { message: m, .. }
            | Failure::NotFound(m)
            | Failure::Usage(m)
            | Failure::Other(m) => m.clone(),
            Failure::Invalid(errors) => {
                format!("the answers are not valid:\n  {}", errors.join("\n  "))
            }
            Failure::Http { status, body } => {
                let said = body["error"]
                    .as_str()
                    .or_else(|| body["message"].as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| {
                        if body.is_null() {
                            "no details".to_owned()
                        } else {
                            body.to_string()
                        }
                    });
                match status {
                    400 if body["code"] == "invalid_answers" => {
                        let lines: Vec<String> = body["errors"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|e| {
                                format!(
                                    "{}: {}",
                                    e["fieldId"].as_str().unwrap_or("?"),
                                    e["message"].as_str().unwrap_or("invalid")
                                )
                            })
                            .collect();
                        if lines.is_empty() {
                            format!("the gateway refused the answers: {said}")
                        } else {
                            format!(
                                "the gateway refused the answers (nothing was stored):\n  {}",
                                lines.join("\n  ")
                            )
                        }
                    }
                    401 => format!(
                        "the gateway did not accept the token (401: {said}); on the gateway's \
                         machine run without --token (the admin token in inbox-admin.json \
                         changes at every gateway start), else pass a reviewer token"
                    ),
                    403 => format!("not allowed (403): {said}"),
                    404 => format!("not found (404): {said}"),
                    409 => format!("conflict (409): {said}"),
                    s => format!("the gateway answered {s}: {said}"),
                }
            }
        }
    }
}

impl Http {
    /// A client for `base` with `token`.
    pub(crate) fn new(base: &str, token: String) -> Result<Self, Failure> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Failure::Usage(format!(
                "the gateway URL {base:?} must start with http:// or https://"
            )));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Failure::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Http {
            client,
            base,
            token,
        })
    }

    /// The reviewer's connection: flags and environment first, else inbox-admin.json. The
    /// admin file's token is only ever sent to the admin file's own URL.
    pub(super) async fn reviewer(home: Option<PathBuf>, conn: &ConnArgs) -> Result<Self, Failure> {
        let home =
            Home::resolve(home, &context::env_var).map_err(|e| Failure::Other(e.to_string()))?;
        let path = AdminFile::path(&home);
        let admin = AdminFile::read(&path).await?;
        let url = match (&conn.gateway, &admin) {
            (Some(u), _) => u.clone(),
            (None, Some(a)) => a.url.clone(),
            (None, None) => {
                return Err(Failure::Usage(format!(
                    "no gateway to talk to: {} does not exist (start `tern gateway` with this \
                     TERN_HOME, or pass --gateway URL and --token)",
                    path.display()
                )));
            }
        };
        let token = match (&conn.token, &admin) {
            (Some(t), _) if !t.is_empty() => t.clone(),
            (
                _,
                Some(AdminFile {
                    url: u,
                    token: Some(t),
                }),
            ) if same_url(u, &url) => t.clone(),
            _ => {
                return Err(Failure::Usage(format!(
                    "no reviewer token for {url}: pass --token or set TERN_INBOX_TOKEN (create \
                     a reviewer with `tern inbox reviewers add NAME` on the gateway's machine)"
                )));
            }
        };
        Http::new(&url, token)
    }

    /// Sends a request; any 2xx is an [`Answer`], any other status a [`Failure::Http`].
    pub(crate) async fn send(&self, req: reqwest::RequestBuilder) -> Result<Answer, Failure> {
        let (_, bytes) = self
            .send_raw(req.header("Accept", "application/json"))
            .await?;
        Ok(Answer {
            body: parse_body(&bytes),
        })
    }

    /// Sends a request and reads the whole body; a non-2xx status is a [`Failure::Http`]
    /// with the body parsed as JSON.
    async fn send_raw(&self, req: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), Failure> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| self.unreachable(e))?
            .to_vec();
        if (200..300).contains(&status) {
            Ok((status, bytes))
        } else {
            Err(Failure::Http {
                status,
                body: parse_body(&bytes).unwrap_or(Value::Null),
            })
        }
    }

    /// The body of a GET as bytes (a download).
    pub(crate) async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, Failure> {
        let req = self.client.get(format!("{}{path}", self.base));
        Ok(self.send_raw(req).await?.1)
    }

    fn unreachable(&self, e: reqwest::Error) -> Failure {
        let mut cause = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            cause = format!("{cause}: {s}");
            source = s.source();
        }
        Failure::Unreachable(format!(
            "cannot reach the gateway at {} ({cause}); is `tern gateway` running?",
            self.base
        ))
    }

    pub(crate) async fn get(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Answer, Failure> {
        let mut url = format!("{}{path}", self.base);
        for (i, (k, v)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("{k}={}", path_segment(v)));
        }
        let req = self.client.get(url);
        self.send(req).await
    }

    pub(crate) async fn get_json(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Value, Failure> {
        Ok(self.get(path, query).await?.body.unwrap_or(Value::Null))
    }

    pub(crate) async fn delete(&self, path: &str) -> Result<Answer, Failure> {
        let req = self.client.delete(format!("{}{path}", self.base));
        self.send(req).await
    }

    /// A POST whose answer may take up to `timeout` (a compaction writes a summary first).
    pub(crate) async fn post_waiting(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Answer, Failure> {
        let req = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .timeout(timeout);
        self.send(req).await
    }

    pub(crate) async fn post_json(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Answer, Failure> {
        let mut req = self.client.post(format!("{}{path}", self.base)).json(body);
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        self.send(req).await
    }
}

/// Percent-encodes all but unreserved characters, for a path segment or a query value; ids
/// are UUIDs, but a typo must not reach another route.
pub(super) fn path_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
