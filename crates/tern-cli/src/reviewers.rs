//! `tern inbox reviewers`: the people who may decide the inbox's requests, managed directly
//! on the database (like `tern keys`), and the admin's credentials written at gateway start.
//!
//! Flow of a command: load the configuration → open the store → add, list, remove a
//! reviewer, or make a login link or a bearer token for one → print it. A login link is
//! `<base>/inbox/login/<token>`, where the base is `[inbox] public_url`, else the address in
//! `inbox-admin.json` (the running gateway's), else `[gateway] listen`.
//!
//! The admin credentials written at gateway start: `tern_gateway::admin_file`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::bail;
use tern_config::Home;
use tern_inbox::reviewers::{ReviewerError, Reviewers};

use crate::context;

pub use tern_gateway::admin_file::{ADMIN_FILE, local_url, login_url};

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
                        crate::timefmt::when(r.created_at)
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
