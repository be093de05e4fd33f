//! The error envelope of every endpoint: `{"error":{"message","type","param","code"}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub code: &'static str,
    pub param: Option<&'static str>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        Self {
            status,
            message: message.into(),
            kind,
            code,
            param: None,
            retry_after: None,
        }
    }

    pub fn param(mut self, p: &'static str) -> Self {
        self.param = Some(p);
        self
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "Invalid API key",
        )
    }

    pub fn session_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            format!("Session not found: {id}"),
        )
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn busy(retry_after: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_turns",
            "Too many turns are running; retry later",
        );
        e.kind = "rate_limit_error";
        e.retry_after = Some(retry_after);
        e
    }

    pub fn shutting_down() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "The gateway is shutting down",
        );
        e.retry_after = Some(5);
        e
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }});
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl From<tern_store::StoreError> for ApiError {
    fn from(e: tern_store::StoreError) -> Self {
        match e {
            tern_store::StoreError::SessionNotFound(id) => Self::session_not_found(&id),
            tern_store::StoreError::SessionExists(id) => Self::new(
                StatusCode::CONFLICT,
                "session_exists",
                format!("Session already exists: {id}"),
            ),
            other => {
                // Details stay in the log; the client learns only that the store failed.
                tracing::error!(error = %other, "store error");
                Self::internal("The session store failed; see the gateway's log")
            }
        }
    }
}

impl From<tern_agent::AgentError> for ApiError {
    fn from(e: tern_agent::AgentError) -> Self {
        use tern_agent::AgentError;
        match e {
            AgentError::ModelNotConfigured(m) => {
                // The full text names the server's config file; API clients learn what is
                // missing, the operator reads where in the log.
                tracing::error!("a turn was refused: {m}");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "model_not_configured",
                    "No model is configured on this gateway: its operator must set the \
                     model's endpoint and name (OPENAI_BASE_URL and TERN_MODEL, or [model] \
                     in its config.toml); see the gateway's log",
                )
            }
            // The whole chain: "could not reach …: … connection refused", not only its top.
            AgentError::Model(m) => Self::new(
                StatusCode::BAD_GATEWAY,
                "model_error",
                redact_urls(&tern_llm::error_chain(&m)),
            ),
            AgentError::Store(s) => s.into(),
            AgentError::InvalidInput(m) => Self::bad_request("invalid_input", m),
            AgentError::SessionEnded(id) => Self::new(
                StatusCode::CONFLICT,
                "session_ended",
                format!("Session {id} has ended (it was reset); continue in its successor"),
            ),
        }
    }
}

/// `text` with every URL's credentials and query left out: the model endpoint's address
/// may carry a key (`https://user:key@…`, `?key=…`), which API clients must not see.
pub(crate) fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let next = |s: &str| {
        [s.find("http://"), s.find("https://")]
            .into_iter()
            .flatten()
            .min()
    };
    while let Some(at) = next(rest) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | ','))
            .unwrap_or(tail.len());
        let (url, after) = tail.split_at(end);
        match reqwest::Url::parse(url) {
            Ok(mut u) => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.set_query(None);
                u.set_fragment(None);
                out.push_str(u.as_str());
            }
            Err(_) => out.push_str("<url>"),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod redact_tests {
    use super::redact_urls;

    #[test]
    fn credentials_and_queries_are_left_out_of_urls() {
        assert_eq!(
            redact_urls(
                "could not reach https://bob:s3cret@model.example/v1/chat/completions?key=k1 \
                 (error sending request for url (http://127.0.0.1:9/v1?api_key=k2)): refused"
            ),
            "could not reach https://model.example/v1/chat/completions \
             (error sending request for url (http://127.0.0.1:9/v1)): refused"
        );
        assert_eq!(redact_urls("no address here"), "no address here");
    }
}
