//! Small HTTP helpers: a request with a bearer token, and what a test reads of the answer.

use serde_json::Value;

/// `POST URL` with a bearer token and a JSON body: the status and the JSON answer (null if
/// none).
pub async fn http_post(url: &str, token: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    status_json_or_null(r).await
}

/// `GET URL` with a bearer token: the status and the JSON answer (null if none).
pub async fn http_get(url: &str, token: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    status_json_or_null(r).await
}

/// The status and JSON body of a response, which must be JSON.
pub async fn status_json(r: reqwest::Response) -> (u16, Value) {
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The status and JSON body of a response; `Null` when the body is not JSON.
pub async fn status_json_or_null(r: reqwest::Response) -> (u16, Value) {
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// A body as JSON; `Null` when it is empty.
pub fn json_or_null(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).unwrap()
    }
}

/// A client that does not follow redirects, to see the 303s that forms answer.
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Whether the response's `content-type` starts with `prefix`.
pub fn content_type_starts(r: &reqwest::Response, prefix: &str) -> bool {
    r.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(prefix))
}

/// Asserts the body is a JSON error with a string `error`; returns the body.
pub async fn assert_json_error(r: reqwest::Response) -> Value {
    let body: Value = r.json().await.unwrap();
    assert!(body["error"].is_string(), "{body}");
    body
}
