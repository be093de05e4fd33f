//! `tern inbox reviewers`: the people who may decide the inbox's requests, managed directly
//! on the database (like `tern keys`), and the admin's credentials written at gateway start.
//!
//! Flow of a command: load the configuration → open the store → add, list, remove a
//! reviewer, or make a login link or a bearer token for one → print it. A login link is
//! `<base>/inbox/login/<token>`, where the base is `[inbox] public_url`, else the address in
//! `inbox-admin.json` (the running gateway's), else `[gateway] listen`.
//!
//! Flow at gateway start ([`prepare_admin`]): make sure the `admin` reviewer exists → while
//! admin has never logged in, print a fresh one-time login link to stderr (as Jupyter prints
//! its token URL) → revoke the previous local admin token and write a new one to
//! `$TERN_HOME/inbox-admin.json` (mode 0600, written atomically), so that `tern inbox` on the
//! same machine works with no flags.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::json;
use tern_config::Home;
use tern_inbox::reviewers::{ADMIN, ReviewerError, Reviewers};
use tern_store::Store;

use crate::context;

/// The file the gateway writes its address and a local admin token to.
pub const ADMIN_FILE: &str = "inbox-admin.json";
/// The label of the admin token in [`ADMIN_FILE`]; the previous one is revoked at each start.
const ADMIN_FILE_LABEL: &str = "inbox-admin.json";

#[derive(Debug, clap::Subcommand)]
pub enum ReviewersCommand {
    /// Add a reviewer and print their one-time login link (valid 24 hours)
    Add {
        name: String,
        /// May manage other reviewers
        #[arg(long)]
        admin: bool,
    },
    /// List the reviewers
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a reviewer: their sessions end and their tokens and links stop working
    Remove { name: String },
    /// Print a new one-time login link for a reviewer (valid 24 hours)
    Link { name: String },
    /// Print a new bearer token for a reviewer, for `tern inbox --gateway URL --token …`
    /// from another machine
    Token {
        name: String,
        /// What the token is for, shown nowhere but kept with it
        #[arg(long, default_value = "cli")]
        label: String,
    },
}

/// Runs a `tern inbox reviewers` command.
pub async fn run(home: Option<PathBuf>, cmd: ReviewersCommand) -> anyhow::Result<()> {
    let (home, eff) = context::load_config(home)?;
    let store = context::open_store(&home).await?;
    let reviewers = Reviewers::new(store);
    let base = || {
        link_base(
            eff.config.inbox.public_url.as_deref(),
            &home,
            &eff.config.gateway.listen,
        )
    };
    match cmd {
        ReviewersCommand::Add { name, admin } => {
            reviewers.add(&name, admin).await.map_err(explain)?;
            let token = reviewers.login_token(&name).await.map_err(explain)?;
            println!("{}", login_url(&base(), &token));
            eprintln!(
                "Added reviewer `{name}`. Send them the link above: it logs them in once, \
                 within 24 hours (`tern inbox reviewers link {name}` makes a new one)."
            );
        }
        ReviewersCommand::List { json } => {
            let list = reviewers.list().await.map_err(explain)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                eprintln!(
                    "no reviewers yet; the gateway adds `admin` on its first start, and \
                     `tern inbox reviewers add NAME` adds more"
                );
            } else {
                println!("{:<24}  {:<6}  CREATED (UTC)", "NAME", "ADMIN");
                for r in list {
                    println!(
                        "{:<24}  {:<6}  {}",
                        r.name,
                        if r.admin { "yes" } else { "no" },
                        crate::sessions::when(r.created_at)
                    );
                }
            }
        }
        ReviewersCommand::Remove { name } => {
            if !reviewers.remove(&name).await.map_err(explain)? {
                bail!("no reviewer named `{name}` (see `tern inbox reviewers list`)");
            }
            eprintln!("removed reviewer `{name}`; their sessions, tokens and links no longer work");
        }
        ReviewersCommand::Link { name } => {
            let token = reviewers.login_token(&name).await.map_err(explain)?;
            println!("{}", login_url(&base(), &token));
            eprintln!("The link logs `{name}` in once, within 24 hours.");
        }
        ReviewersCommand::Token { name, label } => {
            let token = reviewers
                .bearer_token(&name, &label)
                .await
                .map_err(explain)?;
            println!("{token}");
            eprintln!(
                "A reviewer token for `{name}`, shown only now. Use it as \
                 `tern inbox --gateway URL --token <token> …` (or TERN_INBOX_TOKEN); \
                 `tern inbox reviewers remove {name}` revokes it."
            );
        }
    }
    Ok(())
}

/// Reviewer errors in the words of this command line.
fn explain(e: ReviewerError) -> anyhow::Error {
    match e {
        ReviewerError::NotFound(name) => anyhow::anyhow!(
            "no reviewer named `{name}` (see `tern inbox reviewers list`; add one with \
             `tern inbox reviewers add {name}`)"
        ),
        other => anyhow::Error::new(other),
    }
}

fn login_url(base: &str, token: &str) -> String {
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

/// The base of login links made outside the gateway (see the module docs).
fn link_base(public_url: Option<&str>, home: &Home, listen: &str) -> String {
    if let Some(url) = public_url.map(str::trim).filter(|u| !u.is_empty()) {
        return url.trim_end_matches('/').to_owned();
    }
    let from_file = std::fs::read_to_string(home.root.join(ADMIN_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["url"].as_str().map(str::to_owned));
    if let Some(url) = from_file {
        return url.trim_end_matches('/').to_owned();
    }
    match listen.parse::<SocketAddr>() {
        Ok(addr) => local_url(addr),
        Err(_) => format!("http://{listen}"),
    }
}

/// At gateway start: the `admin` reviewer, its login link while it has never logged in, and
/// a fresh local admin token in `$TERN_HOME/inbox-admin.json` (see the module docs).
/// `link_base` is `[inbox] public_url` or the gateway's own address; `local_url` is where
/// a CLI on this machine reaches the gateway.
pub async fn prepare_admin(
    home: &Home,
    store: &Store,
    link_base: &str,
    local_url: &str,
) -> anyhow::Result<()> {
    let reviewers = Reviewers::new(store.clone());
    let (_, created) = reviewers
        .ensure(ADMIN, true)
        .await
        .context("creating the inbox's admin reviewer")?;
    if created {
        tracing::info!("created the inbox reviewer `admin`");
    }
    if !reviewers.has_logged_in(ADMIN).await? {
        let token = reviewers.login_token(ADMIN).await?;
        // On stderr only, not in the log: the link is a credential for 24 hours.
        eprintln!(
            "tern: inbox: open {} to log in as admin (the link works once, within 24 hours)",
            login_url(link_base, &token)
        );
    }
    reviewers.revoke_tokens(ADMIN, ADMIN_FILE_LABEL).await?;
    let token = reviewers.bearer_token(ADMIN, ADMIN_FILE_LABEL).await?;
    let text = serde_json::to_string_pretty(&json!({
        "url": local_url,
        "token": token,
        "reviewer": ADMIN,
    }))?;
    let path = home.root.join(ADMIN_FILE);
    let p = path.clone();
    tokio::task::spawn_blocking(move || write_private(&p, text.as_bytes()))
        .await
        .context("writing the inbox admin file")?
        .with_context(|| format!("cannot write {}", path.display()))?;
    tracing::info!(path = %path.display(), "wrote the local inbox admin credential (mode 0600)");
    Ok(())
}

/// Writes `bytes` to `path` atomically with mode 0600: a temporary file beside it, created
/// with that mode (so the secret is never readable by others, not even briefly), synced,
/// then renamed over the old file.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    // A leftover from a crash may have another mode; start afresh.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        // The rename is durable once the directory is synced.
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
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
    fn private_files_are_0600_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ADMIN_FILE);
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!path.with_extension("json.tmp").exists());
    }

    #[test]
    fn login_urls() {
        assert_eq!(
            login_url("https://inbox.example/", "ab"),
            "https://inbox.example/inbox/login/ab"
        );
    }
}
