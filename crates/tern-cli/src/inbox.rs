//! `tern inbox`: the reviewer's command line for the human inbox.
//!
//! Flow: resolve the gateway and a reviewer token ([`Reviewer::connect`]: `--gateway` and
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
//! The HTTP helpers here ([`Http`], [`Failure`], [`AdminFile`]) also serve `tern ask`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_config::Home;
use tern_inbox::Field;
use tern_inbox::model::{Actor, Step, Steps};

use crate::context;

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

/// Percent-encodes all but unreserved characters, for a path segment or a query value; ids
/// are UUIDs, but a typo must not reach another route.
fn path_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn decide(
    http: &Http,
    id: &str,
    kind: &str,
    note: Option<String>,
    reason_code: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let mut outcome = json!({"type": kind});
    if let Some(n) = note {
        outcome["note"] = Value::String(n);
    }
    if let Some(r) = reason_code {
        outcome["reasonCode"] = Value::String(r);
    }
    let result = post_to_request(http, id, "decide", &json!({"outcome": outcome})).await?;
    if json {
        print_json(&result);
    } else {
        let by = result["decidedBy"].as_str().unwrap_or("you");
        println!(
            "{id}: {} by {by}",
            result["outcome"]["type"].as_str().unwrap_or(kind)
        );
    }
    Ok(())
}

/// Posts `body` to the request's `action` (`decide`, `answer` or `withdraw`) and returns the result; a
/// 409 says who was first ([`explain_conflict`]).
async fn post_to_request(
    http: &Http,
    id: &str,
    action: &str,
    body: &Value,
) -> Result<Value, Failure> {
    let path = format!("{}/{action}", request_path(id));
    match http.post_json(&path, body, None).await {
        Ok(r) => Ok(r.body.unwrap_or(Value::Null)),
        Err(f) => Err(explain_conflict(http, id, f).await),
    }
}

/// Turns a 409 into "already decided by X at T", reading the request again.
async fn explain_conflict(http: &Http, id: &str, f: Failure) -> Failure {
    let Failure::Http { status: 409, body } = f else {
        return f;
    };
    let mut message = format!("request {id} was already decided");
    if let Ok(view) = http.get_json(&request_path(id), &[]).await {
        if let Some(by) = view["decidedBy"].as_str() {
            message.push_str(&format!(" by {by}"));
        }
        if let Some(at) = view["decidedAt"].as_str() {
            message.push_str(&format!(" at {}", short_time(at)));
        }
        if let Some(o) = view["outcome"].as_str() {
            message.push_str(&format!(" ({o})"));
        } else if let Some(s) = view["status"].as_str()
            && s != "decided"
        {
            message = format!("request {id} is {s}; it can no longer be decided");
        }
        message.push_str("; the first decision stands");
    }
    Failure::Conflict { message, body }
}

async fn answer(http: &Http, id: &str, specs: &[String], json: bool) -> Result<(), Failure> {
    let view = http.get_json(&request_path(id), &[]).await?;
    if view["kind"].as_str().is_some_and(|k| k != "elicitation") {
        return Err(Failure::NotFound(format!(
            "request {id} is an approval, not an elicitation; decide it with `tern inbox approve` or `reject`"
        )));
    }
    let fields: Vec<Field> = serde_json::from_value(view["fields"].clone()).map_err(|e| {
        Failure::Other(format!(
            "the gateway sent fields this tern cannot read: {e}"
        ))
    })?;
    let answers = convert_answers(&fields, specs).map_err(Failure::Invalid)?;
    let result = post_to_request(http, id, "answer", &json!({"fields": answers})).await?;
    if json {
        print_json(&result);
    } else {
        let by = result["answeredBy"].as_str().unwrap_or("you");
        println!("{id}: answered by {by}");
        if let Some(map) = result["fields"].as_object() {
            for (k, v) in map {
                println!("  {k} = {}", compact(v));
            }
        }
    }
    Ok(())
}

/// `ID=VALUE` arguments → the answers object, typed by each field's kind. Every problem is
/// reported at once; an id the form does not have is one of them.
pub(crate) fn convert_answers(
    fields: &[Field],
    specs: &[String],
) -> Result<Map<String, Value>, Vec<String>> {
    let mut errors = Vec::new();
    let mut answers = Map::new();
    for spec in specs {
        let Some((id, raw)) = spec.split_once('=') else {
            errors.push(format!("--field {spec:?}: write ID=VALUE"));
            continue;
        };
        let id = id.trim();
        let Some(field) = fields.iter().find(|f| f.id() == id) else {
            let known: Vec<&str> = fields.iter().map(Field::id).collect();
            errors.push(format!(
                "{id}: the request has no such field (its fields: {})",
                known.join(", ")
            ));
            continue;
        };
        match convert_value(field, raw) {
            Ok(Value::Array(items)) => {
                // Repeating a Multiselect's --field adds to its list.
                match answers.entry(id.to_owned()).or_insert_with(|| json!([])) {
                    Value::Array(list) => list.extend(items),
                    other => *other = Value::Array(items),
                }
            }
            Ok(v) => {
                if answers.insert(id.to_owned(), v).is_some() {
                    errors.push(format!("{id}: given twice"));
                }
            }
            Err(e) => errors.push(format!("{id}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(answers)
    } else {
        Err(errors)
    }
}

fn convert_value(field: &Field, raw: &str) -> Result<Value, String> {
    match field {
        Field::Number(_) | Field::Slider(_) => parse_number(raw.trim())
            .ok_or_else(|| format!("{} field: {raw:?} is not a number", field.kind())),
        Field::Switch(_) => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "on" | "1" => Ok(Value::Bool(true)),
            "false" | "no" | "n" | "off" | "0" => Ok(Value::Bool(false)),
            _ => Err(format!("Switch field: {raw:?} is not true/false or yes/no")),
        },
        Field::Multiselect(_) => Ok(Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect(),
        )),
        _ => Ok(Value::String(raw.to_owned())),
    }
}

/// A JSON number: an integer when the text is one, so integer-only fields accept it.
fn parse_number(s: &str) -> Option<Value> {
    if let Ok(i) = s.parse::<i64>() {
        return Some(Value::from(i));
    }
    let f: f64 = s.parse().ok()?;
    serde_json::Number::from_f64(f).map(Value::Number)
}

// ---- output -------------------------------------------------------------------------------

pub(crate) fn print_json(v: &Value) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(_) => println!("{v}"),
    }
}

/// A JSON value in one line: strings bare, everything else as JSON.
fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // A bound stored as a float but whole reads better as `10` than as `10.0`.
        Value::Number(n)
            if n.as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e15) =>
        {
            format!("{}", n.as_f64().unwrap_or_default() as i64)
        }
        other => other.to_string(),
    }
}

/// `2024-05-01T07:30:00.123Z` → `2024-05-01 07:30:00Z`: readable, still exact to the second.
pub(crate) fn short_time(s: &str) -> String {
    let (date, rest) = s.split_once('T').unwrap_or((s, ""));
    if rest.is_empty() {
        return s.to_owned();
    }
    let time: String = rest.chars().take(8).collect();
    let zone = rest
        .find(['Z', '+'])
        .or_else(|| rest.rfind('-'))
        .map(|i| &rest[i..])
        .unwrap_or("");
    format!("{date} {time}{zone}")
}

/// Cuts to `n` characters, marking the cut.
fn clip(s: &str, n: usize) -> String {
    let one_line = s.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        let mut out: String = one_line.chars().take(n.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

fn print_list(list: &Value) {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let count = list["count"].as_u64().unwrap_or(items.len() as u64);
    if items.is_empty() {
        eprintln!("no requests match");
        return;
    }
    let w = items
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("?").chars().count())
        .max()
        .unwrap_or(2);
    println!(
        "{:<w$}  {:<11}  {:<9}  {:<12}  {:<20}  SUMMARY",
        "ID", "KIND", "STATUS", "PROJECT", "CREATED"
    );
    for r in items {
        let mut status = r["status"].as_str().unwrap_or("?").to_owned();
        if let Some(o) = r["outcome"].as_str() {
            status = o.to_owned();
        }
        println!(
            "{:<w$}  {:<11}  {:<9}  {:<12}  {:<20}  {}",
            r["id"].as_str().unwrap_or("?"),
            r["kind"].as_str().unwrap_or("?"),
            clip(&status, 9),
            clip(r["projectName"].as_str().unwrap_or(""), 12),
            short_time(r["createdAt"].as_str().unwrap_or("")),
            clip(r["summary"].as_str().unwrap_or(""), 60),
        );
    }
    let shown = items.len() as u64;
    if count > shown {
        eprint!("{shown} of {count} shown");
        if let Some(c) = list["nextCursor"].as_str() {
            eprint!("; next page: --before {c}");
        }
        eprintln!();
    } else {
        eprintln!("{count} in all");
    }
}

fn print_view(v: &Value) {
    let kind = v["kind"].as_str().unwrap_or("request");
    println!(
        "{} {}  [{}]",
        capitalized(kind),
        v["id"].as_str().unwrap_or("?"),
        v["status"].as_str().unwrap_or("?")
    );
    println!(
        "Project  {}   Task  {} ({})",
        v["projectName"].as_str().unwrap_or("?"),
        v["taskName"].as_str().unwrap_or("?"),
        v["taskId"].as_str().unwrap_or("?")
    );
    println!(
        "Created  {}",
        short_time(v["createdAt"].as_str().unwrap_or("?"))
    );
    println!();
    println!("{}", v["summary"].as_str().unwrap_or(""));
    if let Some(ctx) = v["keyValueContext"].as_object()
        && !ctx.is_empty()
    {
        println!("\nContext");
        let width = ctx.keys().map(|k| k.chars().count()).max().unwrap_or(0);
        for (k, val) in ctx {
            println!("  {k:<width$}  {}", compact(val));
        }
    }
    if let Some(rec) = v["approvalRecommendation"].as_object() {
        let mut line = format!(
            "\nRecommendation  {}",
            rec.get("outcome")
                .and_then(|o| o["type"].as_str())
                .unwrap_or("?")
        );
        if let Some(c) = rec.get("confidence").and_then(Value::as_f64) {
            line.push_str(&format!(" (confidence {c})"));
        }
        if let Some(note) = rec.get("outcome").and_then(|o| o["note"].as_str()) {
            line.push_str(&format!(" — note: {note}"));
        }
        if let Some(r) = rec.get("rationale").and_then(Value::as_str) {
            line.push_str(&format!("\n  {r}"));
        }
        println!("{line}");
    }
    let bids: BTreeMap<&str, &Value> = v["fieldBids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| Some((b["fieldId"].as_str()?, &b["value"])))
        .collect();
    if let Some(fields) = v["fields"].as_array()
        && !fields.is_empty()
    {
        println!("\nFields");
        let width = fields
            .iter()
            .map(|f| f["id"].as_str().unwrap_or("?").chars().count())
            .max()
            .unwrap_or(0);
        for f in fields {
            let id = f["id"].as_str().unwrap_or("?");
            let mut line = format!(
                "  {id:<width$}  {}{}  \"{}\"",
                f["type"].as_str().unwrap_or("?"),
                if f["required"].as_bool() == Some(true) {
                    ", required"
                } else {
                    ""
                },
                f["label"].as_str().unwrap_or("")
            );
            line.push_str(&field_constraints(f));
            if let Some(b) = bids.get(id) {
                line.push_str(&format!("  suggested: {}", compact(b)));
            }
            println!("{line}");
        }
    }
    if let Some(att) = v["attachments"].as_array()
        && !att.is_empty()
    {
        println!("\nAttachments (save one with `tern inbox download ID -o FILE`)");
        for a in att {
            println!("  {}", compact(a));
        }
    }
    if let Some(result) = v.get("result").filter(|r| !r.is_null()) {
        println!("\nResult");
        if result["status"] == "withdrawn" {
            let mut line = match result["dismissedBy"].as_str() {
                Some(by) => format!("  dismissed by {by}"),
                None => match v["decidedBy"].as_str() {
                    Some(by) => format!("  withdrawn by {by}"),
                    None => "  withdrawn".to_owned(),
                },
            };
            if let Some(at) = result["withdrawnAt"].as_str() {
                line.push_str(&format!(" at {}", short_time(at)));
            }
            println!("{line}");
            if let Some(r) = result["reason"].as_str() {
                println!("  reason: {r}");
            }
        } else if let Some(o) = result.get("outcome") {
            let mut line = format!("  {}", o["type"].as_str().unwrap_or("?"));
            if let Some(by) = result["decidedBy"].as_str() {
                line.push_str(&format!(" by {by}"));
            }
            if let Some(at) = result["decidedAt"].as_str() {
                line.push_str(&format!(" at {}", short_time(at)));
            }
            println!("{line}");
            if let Some(r) = o["reasonCode"].as_str() {
                println!("  reason: {r}");
            }
            if let Some(n) = o["note"].as_str() {
                println!("  note: {n}");
            }
        } else {
            let mut line = "  answered".to_owned();
            if let Some(by) = result["answeredBy"].as_str() {
                line.push_str(&format!(" by {by}"));
            }
            if let Some(at) = result["answeredAt"].as_str() {
                line.push_str(&format!(" at {}", short_time(at)));
            }
            println!("{line}");
            for (k, val) in result["fields"].as_object().into_iter().flatten() {
                println!("  {k} = {}", compact(val));
            }
        }
    }
    if let Some(events) = v["events"].as_array()
        && !events.is_empty()
    {
        println!("\nTimeline");
        for e in events {
            println!(
                "  {}  {:<8}  {:<21}  {}",
                short_time(e["timestamp"].as_str().unwrap_or("")),
                e["source"].as_str().unwrap_or(""),
                e["eventType"].as_str().unwrap_or(""),
                clip(&event_text(e), 70)
            );
        }
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// What limits a field's answer, in a few words.
fn field_constraints(f: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(fmt) = f["format"].as_str() {
        parts.push(format!("format {fmt}"));
    }
    if f["integerOnly"].as_bool() == Some(true) {
        parts.push("integer".to_owned());
    }
    match (
        f.get("min").filter(|v| !v.is_null()),
        f.get("max").filter(|v| !v.is_null()),
    ) {
        (Some(a), Some(b)) => parts.push(format!("{} to {}", compact(a), compact(b))),
        (Some(a), None) => parts.push(format!("from {}", compact(a))),
        (None, Some(b)) => parts.push(format!("up to {}", compact(b))),
        (None, None) => {}
    }
    if let Some(s) = f["step"].as_f64() {
        parts.push(format!("step {s}"));
    }
    match (f["minLength"].as_u64(), f["maxLength"].as_u64()) {
        (Some(a), Some(b)) => parts.push(format!("{a}-{b} chars")),
        (Some(a), None) => parts.push(format!("at least {a} chars")),
        (None, Some(b)) => parts.push(format!("at most {b} chars")),
        (None, None) => {}
    }
    if let Some(opts) = f["options"].as_array() {
        let o: Vec<String> = opts.iter().map(compact).collect();
        parts.push(format!("options {}", o.join("|")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("  ({})", parts.join(", "))
    }
}

/// The gist of an event's payload for the timeline.
fn event_text(e: &Value) -> String {
    let p = &e["payload"];
    let text = match e["eventType"].as_str().unwrap_or("") {
        "TASK_CREATED" => p["name"].as_str().map(|n| format!("task {n:?}")),
        "APPROVAL_REQUESTED" | "ELICITATION_REQUESTED" => p["summary"].as_str().map(str::to_owned),
        "APPROVAL_DECIDED" => {
            let o = &p["outcome"];
            o["type"].as_str().map(|t| match o["note"].as_str() {
                Some(n) => format!("{t}: {n}"),
                None => t.to_owned(),
            })
        }
        "ELICITATION_PROVIDED" => Some(match p["answeredBy"].as_str() {
            Some(by) => format!("answered by {by}"),
            None => "answered".to_owned(),
        }),
        "ACTION" => p["description"].as_str().map(str::to_owned),
        "EXCEPTION" => p["message"].as_str().map(str::to_owned),
        "NOTE" => p["message"].as_str().map(str::to_owned),
        _ => None,
    };
    let mut text = text.unwrap_or_default();
    if let (Some(from), Some(to)) = (e["transitionFrom"].as_str(), e["transitionTo"].as_str()) {
        text.push_str(&format!(" [{from} → {to}]"));
    }
    text
}

// ---- projects (on the database) ---------------------------------------------------------

async fn projects(home: Option<PathBuf>, cmd: ProjectsCommand) -> anyhow::Result<ExitCode> {
    let (home, _) = context::load_config(home)?;
    let store = context::open_store(&home).await?;
    let inbox = tern_inbox::Inbox::new(store.clone());
    inbox.ensure_default_project().await?;
    let code = match cmd {
        ProjectsCommand::Add {
            name,
            steps,
            initial,
            json,
        } => {
            let steps = match parse_steps(name.trim(), &steps, initial.as_deref()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e}");
                    store.close().await;
                    return Ok(ExitCode::from(EXIT_USAGE));
                }
            };
            match inbox.add_project(name.trim(), steps).await {
                Ok(p) => {
                    if json {
                        print_json(&serde_json::to_value(&p)?);
                    } else {
                        println!("added project {}: {}", p.name, steps_line(&p.steps));
                    }
                    ExitCode::SUCCESS
                }
                Err(e @ tern_inbox::InboxError::Invalid { .. }) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
                Err(e) => return Err(e.into()),
            }
        }
        ProjectsCommand::List { json } => {
            let list = inbox.projects(None).await?;
            if json {
                print_json(&serde_json::to_value(&list)?);
            } else {
                println!("{:<24}  STEPS", "NAME");
                for p in &list.items {
                    println!("{:<24}  {}", p.name, steps_line(&p.steps));
                }
            }
            ExitCode::SUCCESS
        }
    };
    store.close().await;
    Ok(code)
}

/// `triage (AGENT → review), review (HUMAN)`, initial step first.
fn steps_line(steps: &Steps) -> String {
    let mut ordered: Vec<&Step> = steps.steps.iter().collect();
    ordered.sort_by_key(|s| s.name != steps.initial_step);
    ordered
        .iter()
        .map(|s| {
            let exits = match &s.exits {
                Some(e) if !e.is_empty() => format!(" → {}", e.join(", ")),
                Some(_) => " → none".to_owned(),
                None => String::new(),
            };
            format!("{} ({}{exits})", s.name, s.owner.as_str())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--step NAME[:OWNER][>EXIT,EXIT…]` arguments and `--initial` → the project's steps. The
/// service checks consistency (unique names, exits and the initial step among the steps).
pub(crate) fn parse_steps(
    project: &str,
    specs: &[String],
    initial: Option<&str>,
) -> Result<Steps, String> {
    let mut steps = Vec::new();
    for spec in specs {
        let (head, exits) = match spec.split_once('>') {
            Some((h, e)) => (
                h,
                Some(
                    e.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect::<Vec<_>>(),
                ),
            ),
            None => (spec.as_str(), None),
        };
        let (name, owner) = match head.split_once(':') {
            Some((n, o)) => (n.trim(), parse_owner(o.trim())?),
            None => (head.trim(), Actor::Agent),
        };
        if name.is_empty() {
            return Err(format!("--step {spec:?}: the step needs a name"));
        }
        steps.push(Step {
            name: name.to_owned(),
            owner,
            exits,
        });
    }
    if steps.is_empty() {
        if let Some(i) = initial
            && i != project
        {
            return Err(format!(
                "--initial {i:?} names no step; list the steps with --step"
            ));
        }
        steps.push(Step {
            name: project.to_owned(),
            owner: Actor::Agent,
            exits: None,
        });
    }
    let initial_step = initial.map_or_else(|| steps[0].name.clone(), str::to_owned);
    Ok(Steps {
        initial_step,
        steps,
        step_schemas: None,
    })
}

fn parse_owner(s: &str) -> Result<Actor, String> {
    Actor::step_owner(s).map_err(|e| e.to_string())
}

// ---- HTTP ---------------------------------------------------------------------------------

/// `$TERN_HOME/inbox-admin.json`, written by the gateway at every start.
#[derive(Debug, Deserialize)]
pub(crate) struct AdminFile {
    pub url: String,
    pub token: Option<String>,
}

impl AdminFile {
    pub(crate) fn path(home: &Home) -> PathBuf {
        home.root.join(crate::reviewers::ADMIN_FILE)
    }

    /// `Ok(None)` when the file does not exist (no gateway has started here).
    pub(crate) async fn read(path: &Path) -> Result<Option<Self>, Failure> {
        match tokio::fs::read_to_string(path).await {
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
                Failure::Other(format!(
                    "{} is not what the gateway writes: {e}",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(Failure::Other(format!(
                    "no reviewer credentials: {} cannot be read ({e}). An agent's commands \
                     run in a sandbox that keeps tern's home out of reach, so they cannot \
                     decide requests; a human decides in the web inbox or with `tern inbox` \
                     in their own shell",
                    path.display()
                )))
            }
            Err(e) => Err(Failure::Other(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }
}

/// Same base URL, whatever the trailing slash.
pub(crate) fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// A response body as JSON: `None` when empty; text that is not JSON becomes `{"error"}`.
fn parse_body(bytes: &[u8]) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    Some(
        serde_json::from_slice(bytes)
            .unwrap_or_else(|_| json!({"error": String::from_utf8_lossy(bytes).trim().to_owned()})),
    )
}

/// An HTTP client for one gateway, with a bearer token.
pub(crate) struct Http {
    client: reqwest::Client,
    base: String,
    token: String,
}

/// A successful answer: its status and its JSON body (`None` when empty, e.g. a 204).
pub(crate) struct Answer {
    pub status: u16,
    pub body: Option<Value>,
}

/// Why a call or command failed; each maps to one exit code of [`EXIT_CODES`].
#[derive(Debug)]
pub(crate) enum Failure {
    /// The gateway could not be reached (refused, reset, timed out).
    Unreachable(String),
    /// The gateway answered with an error status.
    Http {
        status: u16,
        body: Value,
    },
    /// 409 on a decision, explained.
    Conflict {
        message: String,
        body: Value,
    },
    /// Answers that do not fit the form, found before sending.
    Invalid(Vec<String>),
    NotFound(String),
    Usage(String),
    Other(String),
}

impl Failure {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Failure::Unreachable(_) => EXIT_UNREACHABLE,
            Failure::Http { status, body } => match status {
                401 | 403 => EXIT_AUTH,
                404 => EXIT_NOT_FOUND,
                409 => EXIT_DECIDED,
                400 if body["code"] == "invalid_answers" => EXIT_INVALID,
                _ => EXIT_OTHER,
            },
            Failure::Conflict { .. } => EXIT_DECIDED,
            Failure::Invalid(_) => EXIT_INVALID,
            Failure::NotFound(_) => EXIT_NOT_FOUND,
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Other(_) => EXIT_OTHER,
        }
    }

    /// The message for a person, on stderr; with `json` also a JSON object on stdout
    /// (`{"error", "status"?, "body"?}`) for scripts.
    pub(crate) fn report(&self, json: bool) {
        eprintln!("error: {}", self.message());
        if json {
            let mut out = json!({"error": self.message(), "exitCode": self.exit_code()});
            match self {
                Failure::Http { status, body } => {
                    out["status"] = json!(status);
                    out["body"] = body.clone();
                }
                Failure::Conflict { body, .. } => {
                    out["status"] = json!(409);
                    out["body"] = body.clone();
                }
                Failure::Invalid(errors) => out["errors"] = json!(errors),
                _ => {}
            }
            print_json(&out);
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            Failure::Unreachable(m)
            | Failure::Conflict { message: m, .. }
            | Failure::NotFound(m)
            | Failure::Usage(m)
            | Failure::Other(m) => m.clone(),
            Failure::Invalid(errors) => {
                format!("the answers are not valid:\n  {}", errors.join("\n  "))
            }
            Failure::Http { status, body } => {
                let said = body["error"]
                    .as_str()
                    .or_else(|| body["message"].as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| {
                        if body.is_null() {
                            "no details".to_owned()
                        } else {
                            body.to_string()
                        }
                    });
                match status {
                    400 if body["code"] == "invalid_answers" => {
                        let lines: Vec<String> = body["errors"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|e| {
                                format!(
                                    "{}: {}",
                                    e["fieldId"].as_str().unwrap_or("?"),
                                    e["message"].as_str().unwrap_or("invalid")
                                )
                            })
                            .collect();
                        if lines.is_empty() {
                            format!("the gateway refused the answers: {said}")
                        } else {
                            format!(
                                "the gateway refused the answers (nothing was stored):\n  {}",
                                lines.join("\n  ")
                            )
                        }
                    }
                    401 => format!(
                        "the gateway did not accept the token (401: {said}); on the gateway's \
                         machine run without --token (the admin token in inbox-admin.json \
                         changes at every gateway start), else pass a reviewer token"
                    ),
                    403 => format!("not allowed (403): {said}"),
                    404 => format!("not found (404): {said}"),
                    409 => format!("conflict (409): {said}"),
                    s => format!("the gateway answered {s}: {said}"),
                }
            }
        }
    }
}

impl Http {
    /// A client for `base` with `token`.
    pub(crate) fn new(base: &str, token: String) -> Result<Self, Failure> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Failure::Usage(format!(
                "the gateway URL {base:?} must start with http:// or https://"
            )));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Failure::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Http {
            client,
            base,
            token,
        })
    }

    /// The reviewer's connection: flags and environment first, else inbox-admin.json. The
    /// admin file's token is only ever sent to the admin file's own URL.
    async fn reviewer(home: Option<PathBuf>, conn: &ConnArgs) -> Result<Self, Failure> {
        let home =
            Home::resolve(home, &context::env_var).map_err(|e| Failure::Other(e.to_string()))?;
        let path = AdminFile::path(&home);
        let admin = AdminFile::read(&path).await?;
        let url = match (&conn.gateway, &admin) {
            (Some(u), _) => u.clone(),
            (None, Some(a)) => a.url.clone(),
            (None, None) => {
                return Err(Failure::Usage(format!(
                    "no gateway to talk to: {} does not exist (start `tern gateway` with this \
                     TERN_HOME, or pass --gateway URL and --token)",
                    path.display()
                )));
            }
        };
        let token = match (&conn.token, &admin) {
            (Some(t), _) if !t.is_empty() => t.clone(),
            (
                _,
                Some(AdminFile {
                    url: u,
                    token: Some(t),
                }),
            ) if same_url(u, &url) => t.clone(),
            _ => {
                return Err(Failure::Usage(format!(
                    "no reviewer token for {url}: pass --token or set TERN_INBOX_TOKEN (create \
                     a reviewer with `tern inbox reviewers add NAME` on the gateway's machine)"
                )));
            }
        };
        Http::new(&url, token)
    }

    /// Sends a request; any 2xx is an [`Answer`], any other status a [`Failure::Http`].
    pub(crate) async fn send(&self, req: reqwest::RequestBuilder) -> Result<Answer, Failure> {
        let (status, bytes) = self
            .send_raw(req.header("Accept", "application/json"))
            .await?;
        Ok(Answer {
            status,
            body: parse_body(&bytes),
        })
    }

    /// Sends a request and reads the whole body; a non-2xx status is a [`Failure::Http`]
    /// with the body parsed as JSON.
    async fn send_raw(&self, req: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), Failure> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| self.unreachable(e))?
            .to_vec();
        if (200..300).contains(&status) {
            Ok((status, bytes))
        } else {
            Err(Failure::Http {
                status,
                body: parse_body(&bytes).unwrap_or(Value::Null),
            })
        }
    }

    /// The body of a GET as bytes (a download).
    pub(crate) async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, Failure> {
        let req = self.client.get(format!("{}{path}", self.base));
        Ok(self.send_raw(req).await?.1)
    }

    fn unreachable(&self, e: reqwest::Error) -> Failure {
        let mut cause = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            cause = format!("{cause}: {s}");
            source = s.source();
        }
        Failure::Unreachable(format!(
            "cannot reach the gateway at {} ({cause}); is `tern gateway` running?",
            self.base
        ))
    }

    pub(crate) async fn get(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Answer, Failure> {
        let mut url = format!("{}{path}", self.base);
        for (i, (k, v)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("{k}={}", path_segment(v)));
        }
        let req = self.client.get(url);
        self.send(req).await
    }

    pub(crate) async fn get_json(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Value, Failure> {
        Ok(self.get(path, query).await?.body.unwrap_or(Value::Null))
    }

    pub(crate) async fn delete(&self, path: &str) -> Result<Answer, Failure> {
        let req = self.client.delete(format!("{}{path}", self.base));
        self.send(req).await
    }

    pub(crate) async fn post_json(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Answer, Failure> {
        let mut req = self.client.post(format!("{}{path}", self.base)).json(body);
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        self.send(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Vec<Field> {
        serde_json::from_value(json!([
            {"type": "Number", "id": "n", "label": "N", "required": true, "integerOnly": true},
            {"type": "Slider", "id": "s", "label": "S", "required": false, "min": 0, "max": 1},
            {"type": "Switch", "id": "ok", "label": "OK", "required": true},
            {"type": "Multiselect", "id": "tags", "label": "Tags", "required": false, "options": ["a", "b", "c"]},
            {"type": "Text", "id": "t", "label": "T", "required": false},
        ]))
        .unwrap()
    }

    fn specs(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn answers_are_typed_by_field_kind() {
        let a = convert_answers(
            &fields(),
            &specs(&["n=42", "s=0.5", "ok=yes", "tags=a,b", "tags=c", "t=x=y"]),
        )
        .unwrap();
        assert_eq!(
            Value::Object(a),
            json!({"n": 42, "s": 0.5, "ok": true, "tags": ["a", "b", "c"], "t": "x=y"})
        );
    }

    #[test]
    fn bad_answers_are_all_reported() {
        let e = convert_answers(&fields(), &specs(&["n=many", "ok=perhaps", "nope=1", "t"]))
            .unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e[0].starts_with("n: ") && e[2].contains("no such field"),
            "{e:?}"
        );
    }

    #[test]
    fn steps_parse() {
        let s = parse_steps(
            "refunds",
            &specs(&["triage>review, done", "review:human>done", "done:AGENT>"]),
            None,
        )
        .unwrap();
        assert_eq!(s.initial_step, "triage");
        assert_eq!(s.steps[1].owner, Actor::Human);
        assert_eq!(
            s.steps[0].exits.as_deref(),
            Some(&["review".to_owned(), "done".to_owned()][..])
        );
        assert_eq!(s.steps[2].exits.as_deref(), Some(&[][..]));
        assert!(parse_steps("p", &specs(&["x:robot"]), None).is_err());
        let one = parse_steps("p", &[], None).unwrap();
        assert_eq!((one.initial_step.as_str(), one.steps.len()), ("p", 1));
    }

    #[test]
    fn times_shorten() {
        assert_eq!(
            short_time("2024-05-01T07:30:00.123Z"),
            "2024-05-01 07:30:00Z"
        );
        assert_eq!(
            short_time("2024-05-01T09:30:00+02:00"),
            "2024-05-01 09:30:00+02:00"
        );
    }

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
