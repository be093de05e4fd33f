//! The HTTP client under rmcp's streamable HTTP transport: rmcp's own reqwest client, with
//! one thing added — a request the server refused without answering it fails instead of
//! waiting forever.
//!
//! A server that no longer knows tern's session (it was restarted) may answer a POST with
//! an error status and a JSON-RPC error without an `id` (server-everything answers `400`,
//! "No valid session ID provided"; the specification asks for `404`, which rmcp handles by
//! initializing again). rmcp hands that error to its service, which cannot route an id-less
//! error to the request and drops it: the call would wait until its `tool_timeout`, and
//! every later call too, as nothing ends the session. An id-less error in answer to a
//! request is the server refusing the request, so [`SessionHttp`] makes it a transport
//! error; [`crate::McpClient`] then ends the session, and the manager starts a new one.
//!
//! A response stream (a call's SSE answer, the session's GET stream) that breaks is
//! reconnected by rmcp; by default for ever, with delays doubling without bound, so a call
//! in flight when its server died waited until its `tool_timeout`. [`reconnects`] bounds
//! that to a network blip's worth: past it the stream ends, the call fails as its
//! connection closed, and the session ends as above.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::ServiceError;
use rmcp::transport::common::client_side_sse::{ExponentialBackoff, SseRetryPolicy};
use rmcp::transport::streamable_http_client::{
    HttpStatusError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// How many redirects one request follows (as rmcp's default client).
const MAX_REDIRECTS: usize = 10;
/// How many times a broken response stream is reconnected, and the first delay (doubling):
/// 0.5 + 1 + 2 s, enough for a blip, short against a `tool_timeout`.
const RECONNECTS: usize = 3;
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// The reconnection policy of response streams (see the module docs).
pub(crate) fn reconnects() -> Arc<dyn SseRetryPolicy> {
    let mut policy = ExponentialBackoff::default();
    policy.max_times = Some(RECONNECTS);
    policy.base_duration = RECONNECT_DELAY;
    Arc::new(policy)
}

/// rmcp's reqwest client for streamable HTTP, failing requests the server refused.
#[derive(Clone)]
pub(crate) struct SessionHttp(reqwest::Client);

impl SessionHttp {
    /// The client rmcp would build (no idle pooling; only same-origin 307/308 redirects,
    /// which keep the method and body), or the error building it gave.
    pub(crate) fn new() -> Result<Self, reqwest::Error> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let keeps_body = matches!(
                attempt.status(),
                reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
            );
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if !keeps_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("exceeded {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirects)
            .build()
            .map(SessionHttp)
    }
}

/// The HTTP status of a request refused with 429 or a 5xx (rmcp's `HttpStatusError`), if
/// that is why `e` failed.
pub(crate) fn busy_status(e: &ServiceError) -> Option<u16> {
    let ServiceError::TransportSend(e) = e else {
        return None;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.error.as_ref());
    while let Some(current) = source {
        if let Some(status) = current.downcast_ref::<HttpStatusError>() {
            return Some(status.status);
        }
        if let Some(StreamableHttpError::<reqwest::Error>::HttpStatus(status)) =
            current.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return Some(status.status);
        }
        source = current.source();
    }
    None
}

/// `response` to `message`, unless it is an id-less error answering a request (see the
/// module docs).
fn refused(
    message_was_request: bool,
    response: Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
    match response {
        Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _))
            if message_was_request && e.id.is_none() =>
        {
            Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!(
                    "the server refused the request without answering it: {} ({})",
                    e.error.message, e.error.code.0
                ),
            )))
        }
        other => other,
    }
}

impl StreamableHttpClient for SessionHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let request = matches!(message, ClientJsonRpcMessage::Request(_));
        refused(
            request,
            self.0
                .post_message(uri, message, session_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let request = matches!(message, ClientJsonRpcMessage::Request(_));
        refused(
            request,
            self.0
                .post_message_with_max_sse_event_size(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
        )
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let request = matches!(message, ClientJsonRpcMessage::Request(_));
        refused(
            request,
            self.0
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await,
        )
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn json_answer(v: serde_json::Value) -> StreamableHttpPostResponse {
        StreamableHttpPostResponse::Json(serde_json::from_value(v).unwrap(), None)
    }

    fn send_error(e: StreamableHttpError<reqwest::Error>) -> ServiceError {
        ServiceError::TransportSend(rmcp::transport::DynamicTransportError::new::<
            rmcp::transport::StreamableHttpClientTransport<SessionHttp>,
            rmcp::RoleClient,
        >(e))
    }

    #[test]
    fn a_busy_server_is_told_from_a_lost_session() {
        for status in [429, 503] {
            let busy = send_error(StreamableHttpError::HttpStatus(HttpStatusError::new(
                status, None,
            )));
            assert_eq!(busy_status(&busy), Some(status));
        }
        let lost = send_error(StreamableHttpError::UnexpectedServerResponse(
            "the server refused the request without answering it".into(),
        ));
        assert_eq!(busy_status(&lost), None);
        assert_eq!(busy_status(&ServiceError::TransportClosed), None);
    }

    #[test]
    fn an_id_less_error_to_a_request_is_a_transport_error() {
        let refusal = || {
            json_answer(json!({"jsonrpc": "2.0", "error": {
                "code": -32000, "message": "Bad Request: No valid session ID provided"}}))
        };
        let err = refused(true, Ok(refusal())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unexpected server response: the server refused the request without answering it: Bad Request: No valid session ID provided (-32000)"
        );
        // A notification expects no answer; an error naming its request is that request's.
        assert!(refused(false, Ok(refusal())).is_ok());
        let answered = json_answer(json!({"jsonrpc": "2.0", "id": 3, "error": {
            "code": -32602, "message": "Invalid params"}}));
        assert!(matches!(
            refused(true, Ok(answered)),
            Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::Error(_),
                _
            ))
        ));
    }
}
