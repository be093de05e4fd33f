//! The inbox's admin at gateway start, and `$TERN_HOME/inbox-admin.json`.
//!
//! Flow ([`prepare_admin`]): make sure the `admin` reviewer exists → while admin has never
//! logged in, make a fresh one-time login link (the caller prints it, as Jupyter prints its
//! token URL) → revoke the previous local admin token and write a new one to
//! `$TERN_HOME/inbox-admin.json` (mode 0600, written atomically), so that `tern inbox` on the
//! same machine works with no flags.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use serde_json::json;
use tern_config::Home;
use tern_inbox::reviewers::{ADMIN, ReviewerError, Reviewers};
use tern_store::Store;

/// The file the gateway writes its address and a local admin token to.
pub const ADMIN_FILE: &str = "inbox-admin.json";
/// The label of the admin token in [`ADMIN_FILE`]; the previous one is revoked at each start.
const ADMIN_FILE_LABEL: &str = "inbox-admin.json";

/// Why the admin could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum AdminFileError {
    #[error("the inbox's admin reviewer: {0}")]
    Reviewer(#[from] ReviewerError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A login link: `<base>/inbox/login/<token>`.
pub fn login_url(base: &str, token: &str) -> String {
    format!("{}/inbox/login/{token}", base.trim_end_matches('/'))
}

/// Where a person's browser reaches the gateway that listens on `addr`: a wildcard address
/// is reached through loopback.
pub fn local_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// At gateway start: the `admin` reviewer, and a fresh local admin token in
/// `$TERN_HOME/inbox-admin.json` (see the module docs). `link_base` is `[inbox] public_url`
/// or the gateway's own address; `local_url` is where a CLI on this machine reaches the
/// gateway. Returns admin's one-time login link while admin has never logged in: a
/// credential for 24 hours, for the terminal only (never the log).
pub async fn prepare_admin(
    home: &Home,
    store: &Store,
    link_base: &str,
    local_url: &str,
) -> Result<Option<String>, AdminFileError> {
    let reviewers = Reviewers::new(store.clone());
    let (_, created) = reviewers.ensure(ADMIN, true).await?;
    if created {
        tracing::info!("created the inbox reviewer `admin`");
    }
    let login = if reviewers.has_logged_in(ADMIN).await? {
        None
    } else {
        let token = reviewers.login_token(ADMIN).await?;
        Some(login_url(link_base, &token))
    };
    reviewers.revoke_tokens(ADMIN, ADMIN_FILE_LABEL).await?;
    let token = reviewers.bearer_token(ADMIN, ADMIN_FILE_LABEL).await?;
    let text = json!({
        "url": local_url,
        "token": token,
        "reviewer": ADMIN,
    })
    .to_string();
    let path = home.root.join(ADMIN_FILE);
    let p = path.clone();
    let written =
        tokio::task::spawn_blocking(move || tern_util::fs::write_private(&p, text.as_bytes()))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    written.map_err(|source| AdminFileError::Write {
        path: path.clone(),
        source,
    })?;
    tracing::info!(path = %path.display(), "wrote the local inbox admin credential (mode 0600)");
    Ok(login)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_urls_reach_wildcards_through_loopback() {
        assert_eq!(
            local_url("0.0.0.0:8642".parse().unwrap()),
            "http://127.0.0.1:8642"
        );
        assert_eq!(local_url("[::]:80".parse().unwrap()), "http://[::1]:80");
        assert_eq!(
            local_url("10.0.0.5:8642".parse().unwrap()),
            "http://10.0.0.5:8642"
        );
    }

    #[test]
    fn login_urls() {
        assert_eq!(
            login_url("https://inbox.example/", "ab"),
            "https://inbox.example/inbox/login/ab"
        );
    }
}
