//! The page shell every web inbox page shares (header, navigation, inline stylesheet), the headers
//! every page is sent with, the small stand-alone page of the sign-in routes and of refused
//! requests (used by `reviewer_auth`, which sits below the web inbox), and small formatting
//! helpers.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use tern_inbox::Timestamp;

/// The stylesheet, inlined into every page's `<head>`: a separate asset route would be an
/// endpoint that answers without authentication (only `/health` may), and the sheet is
/// small. The Content-Security-Policy allows it by hash ([`CSP`]).
const CSS: &str = include_str!("inbox.css");

/// The Content-Security-Policy of every inbox page. Everything comes from the gateway itself;
/// the only inline code allowed is the stylesheet and the pages' three scripts, named by their
/// SHA-256, so markup that slipped into a page through some escaping bug could run nothing
/// (no other inline script, no `on…=` handler, no `style=` attribute). Pages cannot be
/// framed, and forms post only to the gateway.
static CSP: std::sync::LazyLock<HeaderValue> = std::sync::LazyLock::new(|| {
    let policy = format!(
        "default-src 'self'; script-src {} {} {}; style-src {}; img-src 'self'; \
         object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        csp_hash(super::scripts::LOCAL_TIME_SCRIPT),
        csp_hash(super::scripts::LIVE_SCRIPT),
        csp_hash(super::scripts::PENDING_SCRIPT),
        csp_hash(CSS),
    );
    // The policy is ASCII, so this cannot fail; if it did, pages would fail closed (unstyled,
    // without scripts) rather than go out without a policy.
    HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'none'"))
});

/// A CSP hash source, `'sha256-<base64>'`, for an inline element whose content is `text`.
fn csp_hash(text: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// Which navigation entry is the current page.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Nav {
    Pending,
    History,
    None,
}

/// One HTML page.
pub(super) struct Page<'a> {
    pub title: &'a str,
    pub nav: Nav,
    /// The signed-in reviewer's name, shown in the header.
    pub reviewer: Option<&'a str>,
    /// The session's CSRF token, for the sign-out form (cookie sessions only).
    pub csrf: Option<&'a str>,
    /// How many requests are pending, shown in the tab's title (`(3) …`) so a reviewer
    /// sees work arrive in a background tab.
    pub pending: Option<u64>,
    pub body: Markup,
    /// Inline script run after the page (live refresh); the pages work without it. Only the
    /// scripts [`CSP`] names by hash run.
    pub script: Option<&'static str>,
}

impl Page<'_> {
    pub fn render(self, status: StatusCode) -> Response {
        let doc = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    meta name="color-scheme" content="light";
                    title {
                        @if let Some(n) = self.pending.filter(|n| *n > 0) { "(" (n) ") " }
                        (self.title) " · tern inbox"
                    }
                    style { (PreEscaped(CSS)) }
                }
                body {
                    header.top {
                        div.inner {
                            a.brand href="/inbox" { "tern inbox" }
                            nav aria-label="Inbox" {
                                a href="/inbox" aria-current=[(self.nav == Nav::Pending).then_some("page")] { "Pending" }
                                a href="/inbox?status=decided" aria-current=[(self.nav == Nav::History).then_some("page")] { "History" }
                            }
                            @if let Some(name) = self.reviewer {
                                div.who {
                                    span { "Signed in as " strong { (name) } }
                                    @if let Some(csrf) = self.csrf.filter(|c| !c.is_empty()) {
                                        form.signout method="post" action="/inbox/logout" {
                                            input type="hidden" name="csrf_token" value=(csrf);
                                            button.link type="submit" { "Sign out" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    main { (self.body) }
                    script { (PreEscaped(super::scripts::LOCAL_TIME_SCRIPT)) }
                    @if let Some(js) = self.script {
                        script { (PreEscaped(js)) }
                    }
                }
            }
        };
        html_response(status, doc.into_string())
    }
}

/// An HTML response with the headers every inbox page carries: not cached (it shows live
/// state and a CSRF token), not framed (no clickjacking of the decision buttons), no
/// referrer (a login link's token must not leak to an attachment's host), never sniffed as
/// another type, and the Content-Security-Policy ([`CSP`]).
fn html_response(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CONTENT_SECURITY_POLICY, CSP.clone());
    resp
}

/// A page of its own, outside the web inbox's shell (no navigation: the person may not be
/// signed in), with the inbox's stylesheet and the headers of every inbox page. `head` and
/// `body` are markup made here; anything in them from outside must be escaped.
pub(crate) fn small_page(status: StatusCode, title: &str, head: &str, body: &str) -> Response {
    let page = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">{head}\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · tern inbox</title><style>{css}</style></head>\
         <body><header class=\"top\"><div class=\"inner\"><span class=\"brand\">tern inbox\
         </span></div></header><main>{body}</main></body></html>",
        title = escape(title),
        css = CSS,
    );
    html_response(status, page)
}

/// A small page with a fixed text (nothing from the request goes into it).
pub(crate) fn html_page(status: StatusCode, title: &str, text: &str) -> Response {
    small_page(
        status,
        title,
        "",
        &format!(
            "<h1>{}</h1><div class=\"card\"><p>{}</p></div>",
            escape(title),
            escape(text)
        ),
    )
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A page that only says what went wrong, with a way back.
pub(super) fn message_page(
    status: StatusCode,
    reviewer: Option<&str>,
    title: &str,
    text: &str,
) -> Response {
    Page {
        title,
        nav: Nav::None,
        reviewer,
        csrf: None,
        pending: None,
        body: html! {
            h1 { (title) }
            div.card {
                p { (text) }
                p { a href="/inbox" { "Back to the inbox" } }
            }
        },
        script: None,
    }
    .render(status)
}

/// `2024-05-01 07:30 UTC` in a `<time>` element carrying the exact instant in UTC; the
/// page's script ([`super::scripts::LOCAL_TIME_SCRIPT`]) shows it in the reader's time
/// zone, and without scripts the UTC text stays.
pub(super) fn when(t: &Timestamp) -> Markup {
    let millis = t.unix_millis();
    let utc = Timestamp::from_unix_millis(millis);
    let text = utc.as_str();
    // from_unix_millis writes `YYYY-MM-DDTHH:MM:SS.mmmZ`: always ASCII, 24 characters.
    let shown = match (text.get(0..10), text.get(11..16)) {
        (Some(date), Some(time)) => format!("{date} {time} UTC"),
        _ => text.to_owned(),
    };
    html! { time datetime=(text) title=(shown) { (shown) } }
}

/// `APPROVE` → `Approve`, `EDIT_AND_APPROVE` → `Edit and approve`.
pub(super) fn humanize(wire: &str) -> String {
    let lower = wire.replace('_', " ").to_lowercase();
    let mut chars = lower.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A JSON value as a person reads it: strings without quotes, lists joined by commas,
/// booleans as yes/no.
pub(super) fn plain(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "—".into(),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Object(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humanize_outcomes() {
        assert_eq!(humanize("APPROVE"), "Approve");
        assert_eq!(humanize("EDIT_AND_APPROVE"), "Edit and approve");
        assert_eq!(humanize(""), "");
    }

    #[test]
    fn when_shows_utc_minutes() {
        let t = Timestamp::parse("2024-05-01T09:30:15+02:00").unwrap();
        let s = when(&t).into_string();
        assert!(s.contains("2024-05-01 07:30 UTC"), "{s}");
        assert!(s.contains("datetime=\"2024-05-01T07:30:15.000Z\""), "{s}");
    }
}
