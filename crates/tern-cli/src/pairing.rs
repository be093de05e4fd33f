//! `tern pairing`: who, besides a channel's `allowed_users`, may talk to the agent from a
//! chat app. The owner lists pending codes and approved users, approves a code a chat user
//! was sent, or revokes a user — on the database in `$TERN_HOME`, no gateway needed. The
//! rules (expiry, limits, lockout) are `tern_channels::pairing`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use tern_channels::pairing::{MAX_FAILED_APPROVALS, Pairing, PairingError};
use tern_inbox::reviewers::Reviewers;

use crate::context;
use crate::timefmt::when;

#[derive(Debug, clap::Args)]
pub struct PairingArgs {
    #[command(subcommand)]
    pub command: PairingCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PairingCommand {
    /// List pending codes (not the codes themselves: they are stored hashed) and approved users
    List {
        #[arg(long)]
        json: bool,
    },
    /// Approve the code a chat user was sent: they may then talk to the agent
    Approve {
        /// The chat platform, e.g. `telegram` or `matrix`
        platform: String,
        /// The 8-character code the user was sent
        code: String,
        /// The inbox reviewer this user decides approvals as (see `tern inbox reviewers list`)
        #[arg(long)]
        reviewer: Option<String>,
    },
    /// Revoke an approved user: they may no longer talk to the agent
    Revoke { platform: String, user_id: String },
}

/// Runs a `tern pairing` command.
pub async fn run(home: Option<PathBuf>, cmd: PairingCommand) -> anyhow::Result<ExitCode> {
    let (home, _eff) = context::load_config(home)?;
    let store = context::open_store(&home).await?;
    let pairing = Pairing::new(store.clone());
    let now = tern_util::clock::now_ms();
    match cmd {
        PairingCommand::List { json } => {
            let pending = store.pairing_pending(now).await?;
            let approved = store.pairing_approved().await?;
            if json {
                let v = serde_json::json!({ "pending": pending, "approved": approved });
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            if pending.is_empty() && approved.is_empty() {
                eprintln!("no pending codes and no approved users");
            }
            if !pending.is_empty() {
                println!("PENDING");
                println!(
                    "{:<10}  {:<24}  {:<20}  EXPIRES (UTC)",
                    "PLATFORM", "USER", "NAME"
                );
                for p in pending {
                    println!(
                        "{:<10}  {:<24}  {:<20}  {}",
                        p.platform,
                        p.user_id,
                        p.display_name,
                        when(p.expires_at)
                    );
                }
            }
            if !approved.is_empty() {
                println!("APPROVED");
                println!(
                    "{:<10}  {:<24}  {:<20}  {:<12}  {:<16}  REVOKED (UTC)",
                    "PLATFORM", "USER", "NAME", "REVIEWER", "APPROVED (UTC)"
                );
                for a in approved {
                    println!(
                        "{:<10}  {:<24}  {:<20}  {:<12}  {:<16}  {}",
                        a.platform,
                        a.user_id,
                        a.display_name,
                        a.reviewer.as_deref().unwrap_or("-"),
                        when(a.approved_at),
                        a.revoked_at.map_or_else(|| "-".to_owned(), when)
                    );
                }
            }
        }
        PairingCommand::Approve {
            platform,
            code,
            reviewer,
        } => {
            // Checked before the code, so a typo in the name does not use the code up.
            if let Some(name) = &reviewer
                && Reviewers::new(store.clone()).get(name).await?.is_none()
            {
                bail!(
                    "no inbox reviewer named `{name}` (see `tern inbox reviewers list`; add one \
                     with `tern inbox reviewers add {name}`)"
                );
            }
            let a = pairing
                .approve(&platform, &code, reviewer.as_deref(), now)
                .await
                .map_err(explain)?;
            eprintln!(
                "approved {} ({}) on {}{}",
                a.user_id,
                a.display_name,
                a.platform,
                reviewer.map_or_else(String::new, |r| format!(", deciding as reviewer `{r}`"))
            );
        }
        PairingCommand::Revoke { platform, user_id } => {
            pairing.revoke(&platform, &user_id, now).await?;
            eprintln!("revoked {user_id} on {platform}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Pairing errors in the words of this command line: times as dates, not milliseconds.
fn explain(e: PairingError) -> anyhow::Error {
    match e {
        PairingError::LockedOut {
            platform,
            locked_until,
        } => anyhow::anyhow!(
            "pairing on {platform} is locked after {MAX_FAILED_APPROVALS} wrong codes, until {} \
             UTC; no code can be approved there before then",
            when(locked_until)
        ),
        other => anyhow::Error::new(other),
    }
}
