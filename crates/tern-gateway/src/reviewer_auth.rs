//! Who is reviewing: authentication of the people who use the inbox (reviewers), kept apart
//! from agent keys so that **an agent can never decide a request**.
//!
//! # The flow
//!
//! 1. A person opens a one-time login link `GET /inbox/login/{token}` (printed by
//!    `tern inbox reviewers add|link NAME`, or by the gateway's first start for `admin`). The
//!    link's page only checks the token and shows a "Sign in" button, which posts it
//!    (`POST /inbox/login`, form field `token`): a link preview in a chat or mail client
//!    fetches the link too, and must not use it up. The POST calls
//!    [`tern_inbox::reviewers::Reviewers::login`], which consumes the token and opens a
//!    session; the answer sets the session cookie [`COOKIE`] (`HttpOnly; SameSite=Strict;
//!    Path=/; Secure`) and sends the browser on to `/inbox`. A used, expired or unknown
//!    token gets a 401 page that says to ask for a new link, on the GET and on the POST.
//! 2. Every reviewer route takes the [`Reviewer`] extractor, which accepts either
//!    - `Authorization: Bearer tern_rv_…`, a reviewer token (the CLI), or
//!    - the session cookie (the browser), which also yields the session's CSRF token.
//!
//!    An *agent key* as bearer token is refused with 403 (`agent keys cannot act as
//!    reviewers`); no or unknown credentials get 401 — JSON, or for a browser
//!    (`Accept: text/html`) a page that says how to get a login link.
//! 3. Every state-changing request that came with the cookie must carry the session's CSRF
//!    token (form field `csrf_token` or header `X-CSRF-Token`), checked by
//!    [`Reviewer::check_csrf`]; a bearer token cannot be sent by another site's form, so
//!    bearer requests need none.
//! 4. `POST /inbox/logout` (CSRF-checked) ends the session and clears the cookie.
//!
//! # Why the login answer is a page, not a redirect
//!
//! A login link is usually clicked in another site (a mail or chat client). The browser
//! treats the whole navigation — and any redirect it follows — as cross-site, and does not
//! send a `SameSite=Strict` cookie with it, so a `303` to `/inbox` would arrive without the
//! fresh cookie and show "not signed in". The login answer is therefore a small page that
//! moves on to `/inbox` by itself (`<meta http-equiv="refresh">`, no script needed): that
//! navigation starts from the inbox's own page, so the cookie goes with it. (The sign-in
//! POST comes from the inbox's own page too; the page keeps working however the browser
//! judges that chain.)
//!
//! # `Secure` over plain HTTP
//!
//! The cookie is always `Secure`. Browsers keep and send `Secure` cookies over plain HTTP
//! for `localhost` and `127.0.0.1` (potentially trustworthy origins; checked with headless
//! Chromium), which covers a gateway used on its own machine. A gateway reached from other
//! machines must sit behind HTTPS (a TLS-terminating proxy, with `[inbox] public_url` set to
//! its `https://` address) — a session cookie must not travel in clear text anyway.

use axum::Router;
use std::collections::HashMap;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use subtle::ConstantTimeEq;
use tern_inbox::reviewers::{ReviewerError, SESSION_TTL_MS};

use crate::AppState;
use crate::reviewer_router;
use crate::web::layout::{escape, html_page, small_page};

/// The session cookie's name.
pub const COOKIE: &str = "tern_inbox";
/// The header that carries the CSRF token of a cookie-authenticated JSON request.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The form field that carries it in an HTML form.
pub const CSRF_FIELD: &str = "csrf_token";

/// A reviewer, authenticated by a session cookie or a reviewer bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reviewer {
    /// The reviewer's name: `decidedBy` / `answeredBy` of what they decide.
    pub name: String,
    /// The session's CSRF token (only with a cookie), to put into every form.
    pub csrf: Option<String>,
    /// Whether the request came with the session cookie (then POSTs need the CSRF token).
    pub via_cookie: bool,
}

/// Why a reviewer route refused a request.
#[derive(Debug)]
pub enum AuthError {
    /// No credentials, or unknown ones. `html` when the client asked for a page.
    Unauthorized { html: bool },
    /// An agent key was presented where a reviewer is needed.
    AgentKey,
    /// A cookie-authenticated change without the session's CSRF token.
    Csrf,
    /// The reviewer store failed (details in the log).
    Internal,
}

impl From<ReviewerError> for AuthError {
    fn from(e: ReviewerError) -> Self {
        tracing::error!(error = %e, "reviewer store error");
        AuthError::Internal
    }
}

const LOGIN_HELP: &str = "Open a login link to sign in. The inbox's admin makes one with \
                          `tern inbox reviewers link NAME` (or `tern inbox reviewers add NAME` \
                          for a new reviewer); a link works once and for 24 hours.";

impl AuthError {
    fn status(&self) -> StatusCode {
        match self {
            AuthError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            AuthError::AgentKey | AuthError::Csrf => StatusCode::FORBIDDEN,
            AuthError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn message(&self) -> &'static str {
        match self {
            AuthError::Unauthorized { .. } => {
                "reviewer login required: open a login link, or send a reviewer token \
                 (Authorization: Bearer tern_rv_…)"
            }
            AuthError::AgentKey => "agent keys cannot act as reviewers",
            AuthError::Csrf => "missing or wrong CSRF token; reload the page and try again",
            AuthError::Internal => "internal error",
        }
    }

    /// The refusal as an HTML page, for the web inbox's forms.
    pub fn html_response(&self) -> Response {
        let (title, text) = match self {
            AuthError::Unauthorized { .. } => ("Not signed in", LOGIN_HELP),
            AuthError::AgentKey => (
                "Agent keys cannot review",
                "Agent keys cannot act as reviewers. Sign in with a reviewer login link.",
            ),
            AuthError::Csrf => (
                "Form expired",
                "The form was missing its security token or came from an old page. Go back, \
                 reload the page and submit it again.",
            ),
            AuthError::Internal => ("Error", "The inbox failed; see the gateway's log."),
        };
        html_page(self.status(), title, text)
    }
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        if let AuthError::Unauthorized { html: true } = self {
            return self.html_response();
        }
        let mut resp =
            (self.status(), axum::Json(json!({"error": self.message()}))).into_response();
        if let AuthError::Unauthorized { .. } = self {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tern inbox\""),
            );
        }
        resp
    }
}

/// Whether the client asked for a page (a browser navigating) rather than JSON.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// The bearer token of an `Authorization` header (the scheme is case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The value of the cookie `name` (of any `Cookie` header).
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, v)| *k == name && !v.is_empty())
        .map(|(_, v)| v.trim_matches('"'))
}

impl Reviewer {
    /// Checks the CSRF token of a state-changing request: bearer requests need none; a
    /// cookie-authenticated one must submit its session's token.
    pub fn check_csrf(&self, submitted: Option<&str>) -> Result<(), AuthError> {
        if !self.via_cookie {
            return Ok(());
        }
        match (self.csrf.as_deref(), submitted) {
            (Some(expected), Some(got))
                if bool::from(expected.as_bytes().ct_eq(got.trim().as_bytes())) =>
            {
                Ok(())
            }
            _ => Err(AuthError::Csrf),
        }
    }

    /// [`Reviewer::check_csrf`] with the token from the `X-CSRF-Token` header.
    pub fn check_csrf_header(&self, headers: &HeaderMap) -> Result<(), AuthError> {
        self.check_csrf(headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()))
    }
}

impl FromRequestParts<AppState> for Reviewer {
    type Rejection = AuthError;

    async fn from_request_parts(parts: &mut Parts, gw: &AppState) -> Result<Self, AuthError> {
        let html = wants_html(&parts.headers);
        let reviewers = gw.inbox.reviewers();
        // An explicit bearer token decides, whatever cookie comes with it: an agent's key
        // must be refused even from a browser that is signed in.
        if let Some(token) = bearer(&parts.headers) {
            if let Some(name) = reviewers.check_bearer(token).await? {
                return Ok(Reviewer {
                    name,
                    csrf: None,
                    via_cookie: false,
                });
            }
            if gw.auth.check(token).await.is_some() {
                tracing::warn!("an agent key was presented on a reviewer route");
                return Err(AuthError::AgentKey);
            }
            return Err(AuthError::Unauthorized { html });
        }
        if let Some(token) = cookie(&parts.headers, COOKIE)
            && let Some(session) = reviewers.session(token).await?
        {
            return Ok(Reviewer {
                name: session.reviewer,
                csrf: Some(session.csrf),
                via_cookie: true,
            });
        }
        Err(AuthError::Unauthorized { html })
    }
}

/// The login, logout routes (no agent-key check: they are the reviewers' own).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/inbox/login/{token}", get(login_page))
        .route("/inbox/login", post(login))
        .merge(reviewer_router::router(reviewer_routes()))
}

/// The routes here that need a reviewer (the login routes hand the credentials out).
pub(crate) fn reviewer_routes() -> Vec<reviewer_router::Route> {
    vec![reviewer_router::post("/inbox/logout", logout)]
}

/// The `Set-Cookie` value of a session (or, with `None`, of its removal).
fn session_cookie(token: Option<&str>) -> HeaderValue {
    let value = match token {
        Some(t) => format!(
            "{COOKIE}={t}; HttpOnly; SameSite=Strict; Path=/; Secure; Max-Age={}",
            SESSION_TTL_MS / 1000
        ),
        None => format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Secure; Max-Age=0"),
    };
    // Tokens are hex, so the value is always a valid header.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The 401 page of a login link that cannot be used.
fn invalid_link_page() -> Response {
    html_page(
        StatusCode::UNAUTHORIZED,
        "Login link not valid",
        "This login link has already been used, has expired, or is unknown. Ask the inbox's \
         admin for a new link (`tern inbox reviewers link NAME`); each link works once and \
         for 24 hours.",
    )
}

/// `GET /inbox/login/{token}`: a page with a "Sign in" button that posts the token; the
/// token is checked but not consumed, so a chat or mail client's link preview does not use
/// it up (see the module docs).
async fn login_page(State(gw): State<AppState>, Path(token): Path<String>) -> Response {
    let name = match gw.inbox.reviewers().login_token_owner(&token).await {
        Ok(Some(name)) => name,
        Ok(None) => return invalid_link_page(),
        Err(e) => return AuthError::from(e).html_response(),
    };
    // no-store and no-referrer (the token is in this page's URL), like every inbox page.
    small_page(
        StatusCode::OK,
        "Sign in",
        "",
        &format!(
            "<h1>Sign in</h1><div class=\"card\"><p>This link signs you in to the inbox as \
             <strong>{name}</strong>. It works once.</p>\
             <form method=\"post\" action=\"/inbox/login\">\
             <input type=\"hidden\" name=\"token\" value=\"{token}\">\
             <button type=\"submit\">Sign in</button></form></div>",
            name = escape(&name),
            token = escape(&token),
        ),
    )
}

#[derive(Debug, serde::Deserialize)]
struct LoginForm {
    token: Option<String>,
}

/// `POST /inbox/login` (form field `token`): consumes the login token, opens a session, sets
/// the cookie and moves on to `/inbox` (see the module docs for why by a page, not a
/// redirect).
async fn login(
    State(gw): State<AppState>,
    headers: axum::http::HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    // Login CSRF: another site must not be able to sign a browser in (as the attacker, with
    // a link of theirs). Browsers say where a form post comes from; programs send nothing.
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        tracing::warn!("refused a cross-site login post");
        return small_page(
            StatusCode::FORBIDDEN,
            "Open the link directly",
            "",
            "<div class=\"card\"><p>This sign-in came from another site. Open your login \
             link directly in the browser.</p></div>",
        );
    }
    let Some(token) = form.token.filter(|t| !t.is_empty()) else {
        return invalid_link_page();
    };
    let session = match gw.inbox.reviewers().login(&token).await {
        Ok(Some(s)) => s,
        Ok(None) => return invalid_link_page(),
        Err(e) => return AuthError::from(e).html_response(),
    };
    tracing::info!(reviewer = %session.reviewer, "reviewer logged in");
    let mut resp = small_page(
        StatusCode::OK,
        "Signed in",
        "<meta http-equiv=\"refresh\" content=\"0;url=/inbox\">",
        &format!(
            "<div class=\"card\"><p>Signed in as {}. <a href=\"/inbox\">Continue to the \
             inbox</a>.</p></div>",
            escape(&session.reviewer)
        ),
    );
    resp.headers_mut()
        .insert(header::SET_COOKIE, session_cookie(Some(&session.token)));
    resp
}

/// `POST /inbox/logout`: ends the session (CSRF-checked: form field or header) and clears
/// the cookie; a browser gets a "signed out" page, a program 204.
async fn logout(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    req: Request,
) -> Result<Response, AuthError> {
    let headers = req.headers().clone();
    let submitted = match headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()) {
        Some(v) => Some(v.to_owned()),
        None => match csrf_form_field(req, &gw).await {
            Ok(field) => field,
            // Over the body limit: 413 (made JSON or a page by the router's error layer).
            Err(too_large) => return Ok(too_large.into_response()),
        },
    };
    reviewer.check_csrf(submitted.as_deref())?;
    if reviewer.via_cookie
        && let Some(token) = cookie(&headers, COOKIE)
    {
        gw.inbox.reviewers().logout(token).await?;
    }
    let mut resp = if wants_html(&headers) {
        html_page(
            StatusCode::OK,
            "Signed out",
            "You are signed out. To sign in again, open a new login link.",
        )
    } else {
        StatusCode::NO_CONTENT.into_response()
    };
    resp.headers_mut()
        .insert(header::SET_COOKIE, session_cookie(None));
    Ok(resp)
}

/// The `csrf_token` field of a urlencoded form body, if the body is one; the rejection when
/// the body is over the limit (anything else unreadable just has no token).
pub(crate) async fn csrf_form_field(
    req: Request,
    gw: &AppState,
) -> Result<Option<String>, FormRejection> {
    match Form::<HashMap<String, String>>::from_request(req, gw).await {
        Ok(Form(fields)) => Ok(fields.get(CSRF_FIELD).cloned()),
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(e),
        Err(_) => Ok(None),
    }
}
