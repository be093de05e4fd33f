//! `tern inbox`: the reviewer's command line for the human inbox.
//!
//! Flow: resolve the gateway and a reviewer token ([`Http::reviewer`]: `--gateway` and
//! `--token`/`TERN_INBOX_TOKEN`, else the `{url, token}` the gateway writes to
//! `$TERN_HOME/inbox-admin.json` at every start) → call the gateway's JSON reviewer API
//! (`/inbox/api/…`) → print a table or a summary, or the JSON with `--json` → map a failure
//! to its documented exit code ([`EXIT_CODES`]). A 409 on a decision looks the request up
//! again to say who decided it and when. A request id may be given as a unique prefix
//! ([`resolve_id`], as `tern sessions` and `tern ps` take them).
//!
//! `tern inbox projects …` is the exception: like `tern keys`, it works on the database in
//! `$TERN_HOME` directly, with or without a running gateway.
//!
//! Its parts: the command line and its dispatch here; [`client`], the HTTP client of the
//! gateway ([`Http`], also serving `tern sessions delete`; [`Failure`] and [`AdminFile`]
//! serve `tern ask` too); [`show`], what is printed; [`decide`], decisions and answers to forms;
//! [`projects`] and [`steps`], the projects on the database and their `--step` arguments.

mod client;
mod decide;
mod projects;
mod show;
mod steps;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use client::path_segment;
pub(crate) use client::{AdminFile, Failure, Http};
use decide::{answer, decide, post_to_request};
use projects::projects;
pub(crate) use show::print_json;
use show::{clip, print_list, print_view};

/// The exit codes of `tern inbox` (shown by `tern inbox --help`).
pub const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  another error (the gateway failed, a bad answer from it, a local problem)
  2  bad command-line usage, or an id prefix that more than one request starts with
  3  not allowed: no or an unknown reviewer token (401), or not a reviewer's (403)
  4  already decided: the request was decided before (409); says by whom and when
  5  not found: no such request, or not of the kind the command needs (404)
  6  invalid answers: a value does not fit its field (checked here, then by the gateway)
  7  the gateway cannot be reached

Without --gateway, the commands use the gateway whose address and admin token are in
$TERN_HOME/inbox-admin.json (written by `tern gateway` at every start, mode 0600).
From another machine pass --gateway URL with --token (or TERN_INBOX_TOKEN): a
reviewer's token, `tern_rv_…`.";

const EXIT_OTHER: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_AUTH: u8 = 3;
const EXIT_DECIDED: u8 = 4;
const EXIT_NOT_FOUND: u8 = 5;
const EXIT_INVALID: u8 = 6;
const EXIT_UNREACHABLE: u8 = 7;

#[derive(Args, Debug)]
#[command(after_long_help = EXIT_CODES)]
pub struct InboxArgs {
    #[command(flatten)]
    pub conn: ConnArgs,

    #[command(subcommand)]
    pub command: InboxCommand,
}

/// Where the gateway is and who is asking; every subcommand accepts these.
#[derive(Args, Debug, Clone, Default)]
pub struct ConnArgs {
    /// The gateway's base URL, e.g. http://10.0.0.5:8642 (default: from inbox-admin.json)
    #[arg(long, global = true, env = "TERN_INBOX_URL", value_name = "URL")]
    pub gateway: Option<String>,

    /// A reviewer token, tern_rv_… (default: the admin token in inbox-admin.json)
    #[arg(
        long,
        global = true,
        env = "TERN_INBOX_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum InboxCommand {
    /// The commands that call a gateway's reviewer API.
    #[command(flatten)]
    Api(ApiCommand),
    /// Reviewers: the people who decide (on the database in $TERN_HOME; no gateway needed)
    Reviewers {
        #[command(subcommand)]
        command: crate::reviewers::ReviewersCommand,
    },
    /// Projects and their steps (on the database in $TERN_HOME; no gateway needed)
    Projects {
        #[command(subcommand)]
        command: ProjectsCommand,
    },
}

/// The commands that call a gateway's reviewer API (`/inbox/api/…`).
#[derive(Subcommand, Debug)]
pub enum ApiCommand {
    /// List requests, newest first (pending ones unless --status says otherwise)
    List {
        #[arg(long, value_parser = ["pending", "decided", "withdrawn", "expired", "all"], default_value = "pending")]
        status: String,
        /// Only this project's requests
        #[arg(long, value_name = "NAME")]
        project: Option<String>,
        #[arg(long, value_parser = ["approval", "elicitation"])]
        kind: Option<String>,
        /// At most this many (the gateway caps it at 200)
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Continue after a previous page (its "next" cursor)
        #[arg(long, value_name = "CURSOR")]
        before: Option<String>,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Show a request: summary, context, recommendation, fields, result and the timeline
    Show {
        id: String,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Download an attachment of a request (an upload id that `show` lists)
    Download {
        upload_id: String,
        /// Write to this file (default: stdout)
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Approve an approval request
    Approve {
        id: String,
        /// Your words, passed to the agent
        #[arg(long)]
        note: Option<String>,
        /// A machine-readable reason
        #[arg(long, value_name = "CODE")]
        reason_code: Option<String>,
        /// Approve with changes (EDIT_AND_APPROVE); say what changed in --note
        #[arg(long)]
        edit: bool,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Reject an approval request
    Reject {
        id: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long, value_name = "CODE")]
        reason_code: Option<String>,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Dismiss a pending request nobody will decide: it leaves the pending list and its
    /// agent reads it as withdrawn (either kind)
    #[command(visible_alias = "withdraw")]
    Dismiss {
        id: String,
        /// Why, shown to the agent and on the task's timeline
        #[arg(long)]
        reason: Option<String>,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Decide an approval request with any outcome (ESCALATE, REQUEST_MORE_INFO, …)
    Decide {
        id: String,
        #[arg(value_parser = ["APPROVE", "REJECT", "EDIT_AND_APPROVE", "ESCALATE", "REQUEST_MORE_INFO"], ignore_case = true)]
        outcome: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long, value_name = "CODE")]
        reason_code: Option<String>,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Answer an elicitation request: --field ID=VALUE for each field
    #[command(after_long_help = "\
Values are converted by the field's kind: Number and Slider take numbers; Switch takes
true/false, yes/no, on/off or 1/0; Multiselect takes a comma-separated list or the field
repeated (--field tags=a --field tags=b); the other kinds take the text as it is (dates
YYYY-MM-DD, date-times RFC 3339 with an offset, times HH:MM). The gateway checks the
answers again and lists every problem; nothing is stored unless all are valid.")]
    Answer {
        id: String,
        /// ID=VALUE, once per field (repeat for a Multiselect's options)
        #[arg(long = "field", value_name = "ID=VALUE")]
        fields: Vec<String>,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ProjectsCommand {
    /// Add a project with its workflow steps
    #[command(after_long_help = "\
A step is NAME[:OWNER][>EXIT,EXIT…]: OWNER is AGENT (the default) or HUMAN; the exits
are the steps a task may move to from this one (none listed: any step). Quote steps with
exits for the shell, e.g.
  tern inbox projects add refunds --step 'triage>review' --step review:HUMAN
Without --step the project has one step named after it, owned by the agent.")]
    Add {
        name: String,
        /// A step: NAME[:OWNER][>EXIT,EXIT…] (repeat, in order)
        #[arg(long = "step", value_name = "STEP")]
        steps: Vec<String>,
        /// The step new tasks start in (default: the first)
        #[arg(long, value_name = "STEP")]
        initial: Option<String>,
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
    /// List projects and their steps
    List {
        /// Print JSON (for scripts) instead of text
        #[arg(long)]
        json: bool,
    },
}

impl ApiCommand {
    /// Whether `--json` was given.
    fn json(&self) -> bool {
        match self {
            ApiCommand::List { json, .. }
            | ApiCommand::Show { json, .. }
            | ApiCommand::Approve { json, .. }
            | ApiCommand::Reject { json, .. }
            | ApiCommand::Decide { json, .. }
            | ApiCommand::Dismiss { json, .. }
            | ApiCommand::Answer { json, .. } => *json,
            ApiCommand::Download { .. } => false,
        }
    }
}

pub async fn run(home: Option<PathBuf>, args: InboxArgs) -> anyhow::Result<ExitCode> {
    let command = match args.command {
        InboxCommand::Projects { command } => return projects(home, command).await,
        InboxCommand::Reviewers { command } => {
            crate::reviewers::run(home, command).await?;
            return Ok(ExitCode::SUCCESS);
        }
        InboxCommand::Api(command) => command,
    };
    let json = command.json();
    let result = reviewer_command(home, &args.conn, command).await;
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            f.report(json);
            ExitCode::from(f.exit_code())
        }
    })
}

// ---- the reviewer API -------------------------------------------------------------------

async fn reviewer_command(
    home: Option<PathBuf>,
    conn: &ConnArgs,
    command: ApiCommand,
) -> Result<(), Failure> {
    let http = Http::reviewer(home, conn).await?;
    let json = command.json();
    match command {
        ApiCommand::List {
            status,
            project,
            kind,
            limit,
            before,
            ..
        } => {
            let mut query = vec![("status", status)];
            query.extend(project.map(|p| ("project", p)));
            query.extend(kind.map(|k| ("kind", k)));
            query.extend(limit.map(|l| ("limit", l.to_string())));
            query.extend(before.map(|b| ("before", b)));
            let list = http.get_json("/inbox/api/requests", &query).await?;
            if json {
                print_json(&list);
            } else {
                print_list(&list);
            }
        }
        ApiCommand::Show { id, .. } => {
            let id = resolve_id(&http, &id).await?;
            let view = http.get_json(&request_path(&id), &[]).await?;
            if json {
                print_json(&view);
            } else {
                print_view(&view);
            }
        }
        ApiCommand::Download { upload_id, output } => {
            let path = format!("/inbox/uploads/{}", path_segment(&upload_id));
            let bytes = http.get_bytes(&path).await?;
            match output {
                Some(file) => {
                    tokio::fs::write(&file, &bytes).await.map_err(|e| {
                        Failure::Other(format!("cannot write {}: {e}", file.display()))
                    })?;
                    eprintln!("saved {} bytes to {}", bytes.len(), file.display());
                }
                None => {
                    use std::io::Write as _;
                    let mut out = std::io::stdout().lock();
                    out.write_all(&bytes)
                        .and_then(|()| out.flush())
                        .map_err(|e| Failure::Other(format!("cannot write to stdout: {e}")))?;
                }
            }
        }
        ApiCommand::Approve {
            id,
            note,
            reason_code,
            edit,
            ..
        } => {
            let kind = if edit { "EDIT_AND_APPROVE" } else { "APPROVE" };
            let id = resolve_id(&http, &id).await?;
            decide(&http, &id, kind, note, reason_code, json).await?;
        }
        ApiCommand::Reject {
            id,
            note,
            reason_code,
            ..
        } => {
            let id = resolve_id(&http, &id).await?;
            decide(&http, &id, "REJECT", note, reason_code, json).await?;
        }
        ApiCommand::Decide {
            id,
            outcome,
            note,
            reason_code,
            ..
        } => {
            let kind = outcome.to_ascii_uppercase();
            let id = resolve_id(&http, &id).await?;
            decide(&http, &id, &kind, note, reason_code, json).await?;
        }
        ApiCommand::Answer { id, fields, .. } => {
            let id = resolve_id(&http, &id).await?;
            answer(&http, &id, &fields, json).await?;
        }
        ApiCommand::Dismiss { id, reason, .. } => {
            let id = resolve_id(&http, &id).await?;
            let mut body = json!({});
            if let Some(r) = reason {
                body["reason"] = Value::String(r);
            }
            let result = post_to_request(&http, &id, "withdraw", &body).await?;
            if json {
                print_json(&result);
            } else {
                println!("{id}: dismissed; its agent sees it as withdrawn");
            }
        }
    }
    Ok(())
}

/// The shortest id prefix looked up; shorter ones are taken as whole ids.
const MIN_PREFIX: usize = 4;
/// How many candidates an ambiguous prefix lists.
const MAX_CANDIDATES: usize = 10;

/// A whole request id, or the one request whose id starts with `given` (at least
/// [`MIN_PREFIX`] characters). No match is "not found" (exit 5); several are a usage error
/// listing them (exit 2).
async fn resolve_id(http: &Http, given: &str) -> Result<String, Failure> {
    let given = given.trim();
    if given.chars().count() < MIN_PREFIX
        || !given.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Ok(given.to_owned());
    }
    let list = http
        .get_json(
            "/inbox/api/requests",
            &[
                ("status", "all".to_owned()),
                ("idPrefix", given.to_owned()),
                ("limit", (MAX_CANDIDATES + 1).to_string()),
            ],
        )
        .await?;
    // Filtered here too: a gateway without `idPrefix` answers every request.
    let matches: Vec<&Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["id"].as_str().is_some_and(|id| id.starts_with(given)))
        .collect();
    if matches.iter().any(|r| r["id"] == given) {
        return Ok(given.to_owned());
    }
    match matches.as_slice() {
        [] => Err(Failure::NotFound(format!(
            "no request id starts with {given} (see `tern inbox list --status all`)"
        ))),
        [one] => Ok(one["id"].as_str().unwrap_or(given).to_owned()),
        many => {
            let lines: Vec<String> = many
                .iter()
                .take(MAX_CANDIDATES)
                .map(|r| {
                    format!(
                        "{}  {:<9}  {}",
                        r["id"].as_str().unwrap_or("?"),
                        r["status"].as_str().unwrap_or("?"),
                        clip(r["summary"].as_str().unwrap_or(""), 50)
                    )
                })
                .collect();
            let more = if many.len() > MAX_CANDIDATES {
                "\n  …"
            } else {
                ""
            };
            Err(Failure::Usage(format!(
                "more than one request id starts with {given}; give more characters:\n  {}{more}",
                lines.join("\n  ")
            )))
        }
    }
}

fn request_path(id: &str) -> String {
    format!("/inbox/api/requests/{}", path_segment(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reviewer-API commands and the local ones parse into different types, so the
    /// function that calls the gateway cannot be handed a local command.
    #[test]
    fn commands_parse_into_api_or_local() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: InboxArgs,
        }
        let parse = |argv: &[&str]| {
            Cli::try_parse_from(std::iter::once("inbox").chain(argv.iter().copied()))
                .unwrap()
                .args
                .command
        };
        assert!(matches!(
            parse(&["approve", "r1", "--json"]),
            InboxCommand::Api(ApiCommand::Approve { json: true, .. })
        ));
        assert!(matches!(
            parse(&["download", "u1"]),
            InboxCommand::Api(ApiCommand::Download { .. })
        ));
        assert!(matches!(
            parse(&["projects", "list"]),
            InboxCommand::Projects { .. }
        ));
        assert!(matches!(
            parse(&["reviewers", "list"]),
            InboxCommand::Reviewers { .. }
        ));
    }
}
