//! `tern ask`: ask a human from a shell script and wait for the answer.
//!
//! Flow: resolve the gateway (`--gateway`, else the address in `$TERN_HOME/inbox-admin.json`,
//! else the configured listen address) and an *agent* key (`--key`/`TERN_API_KEY`, else the
//! gateway's first key in `$TERN_HOME/gateway.key`, else `TERN_SERVER_KEY`) → act as an
//! agent over the Pump Up agent API: find or create the task, then create the approval or
//! elicitation request, each with an `Idempotency-Key` (so a retry after a lost connection,
//! or a second run with the same `--idempotency-key`, finds the same request) → poll the
//! result: 204 means still pending (wait, backing off up to `--poll-interval`); connection
//! errors and 5xx are waited out for up to `--gateway-timeout` → print the decision and exit
//! with its code.
//!
//! A run that stops waiting (`--timeout`, Ctrl-C) withdraws its request, so nobody decides
//! what nobody waits for any more; `--keep` leaves it pending to wait for again with the
//! same `--idempotency-key`. A request withdrawn from elsewhere (a reviewer dismissed it)
//! ends the wait as declined.
//!
//! Exit codes: 0 approved (APPROVE, EDIT_AND_APPROVE) or answered, 1 any other outcome or
//! withdrawn, 2 usage or another error, 3 timed out, 4 the gateway cannot be reached,
//! 130 Ctrl-C.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use tern_config::Home;
use tern_inbox::Field;
use tern_util::Backoff;
use tern_waits::client::{ClientError, RequestKind};
use tern_waits::pumpup::PumpUp;
use tokio::time::Instant;

use crate::context;
use crate::inbox::{AdminFile, Failure, print_json};

const EXIT_OTHER_OUTCOME: u8 = 1;
const EXIT_ERROR: u8 = 2;
const EXIT_TIMEOUT: u8 = 3;
const EXIT_UNREACHABLE: u8 = 4;
/// How long a withdrawal after Ctrl-C may take before tern ask exits anyway.
const WITHDRAW_ON_EXIT: Duration = Duration::from_secs(5);

const EXIT_CODES: &str = "\
Exit codes:
  0    approved (APPROVE or EDIT_AND_APPROVE), or the form was answered
  1    rejected, or another outcome (ESCALATE, REQUEST_MORE_INFO); the outcome is printed.
       Also when the request was withdrawn meanwhile (a reviewer dismissed it)
  2    bad usage, or an error (the gateway refused the request, a bad key, …)
  3    timed out (--timeout); the request is withdrawn (with --keep it stays pending)
  4    the gateway could not be reached (for --gateway-timeout while waiting)
  130  interrupted (Ctrl-C); the request is withdrawn (with --keep it stays pending)

tern ask acts as an agent: it needs an agent key (--key or TERN_API_KEY; on the gateway's
machine the first key in $TERN_HOME/gateway.key is used) and the gateway's address
(--gateway or TERN_INBOX_URL; on the gateway's machine it is read from
$TERN_HOME/inbox-admin.json). A human decides in the web inbox or with `tern inbox`.";

#[derive(Args, Debug)]
#[command(after_long_help = EXIT_CODES)]
pub struct AskArgs {
    #[command(flatten)]
    pub common: Common,

    #[command(subcommand)]
    pub command: AskCommand,
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The gateway's base URL (default: from inbox-admin.json, else the configured address)
    #[arg(long, global = true, env = "TERN_INBOX_URL", value_name = "URL")]
    pub gateway: Option<String>,

    /// An agent API key (default: $TERN_HOME/gateway.key)
    #[arg(
        long,
        global = true,
        env = "TERN_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub key: Option<String>,

    /// The project the request is filed under
    #[arg(long, global = true, default_value = "default", value_name = "NAME")]
    pub project: String,

    /// File the request under this task (created when the key has none by this name in the
    /// project); default: a new task per request
    #[arg(long, global = true, value_name = "NAME")]
    pub task: Option<String>,

    /// Context shown to the human, KEY=VALUE (repeat)
    #[arg(long = "context", global = true, value_name = "KEY=VALUE")]
    pub context: Vec<String>,

    /// Give up after this long (e.g. 90s, 15m, 2h, 1h30m); default: wait until decided
    #[arg(long, global = true, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,

    /// Leave the request pending in the inbox after a timeout or Ctrl-C (default: withdraw
    /// it); wait for it again with the same --idempotency-key
    #[arg(long, global = true)]
    pub keep: bool,

    /// Give up when the gateway cannot be reached (or fails) for this long
    #[arg(long, global = true, value_parser = parse_duration, default_value = "2m", value_name = "DURATION")]
    pub gateway_timeout: Duration,

    /// The longest wait between two polls of the result
    #[arg(long, global = true, value_parser = parse_duration, default_value = "2s", value_name = "DURATION")]
    pub poll_interval: Duration,

    /// Reuse a request: a second run with the same key waits for the same request instead
    /// of creating another (default: a fresh key per run)
    #[arg(long, global = true, value_name = "KEY")]
    pub idempotency_key: Option<String>,

    /// Print the whole result as JSON
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum AskCommand {
    /// Ask for an approval and wait: exit 0 approved, 1 rejected, 3 timed out
    #[command(after_long_help = EXIT_CODES)]
    Approve {
        /// What to approve, as the human will read it
        summary: String,
    },
    /// Ask for a form to be filled in and print the answers as a JSON object
    #[command(after_long_help = "\
A field SPEC is ID[?][:KIND[ARGS]][:LABEL]
  ?      after the id: the field is optional (fields are required by default)
  KIND   text (the default), email, url, phone, textarea, number, integer, slider,
         switch, select, multiselect, date, datetime, time
  ARGS   in brackets: a range MIN..MAX for number, integer, date, datetime and time
         (either end may be left out), MIN..MAX/STEP for slider (both ends needed),
         MIN..MAX lengths for the text kinds, the options A|B|C (or A,B,C) for select
         and multiselect
  LABEL  the question shown (default: the id); may contain colons
Examples:
  --field 'email:email:Your e-mail'  --field 'size:select[S|M|L]:Size'
  --field 'score:slider[0..10/1]'    --field 'notes?:textarea:Anything else?'
  --field 'when:time[09:00..17:00]:Meeting time'
--fields-json FILE (or - for stdin) reads an array of fields in the Pump Up JSON shape,
e.g. [{\"type\": \"Switch\", \"id\": \"ok\", \"label\": \"OK?\", \"required\": true}].")]
    Form {
        /// A field (see below); repeat, in order
        #[arg(long = "field", value_name = "SPEC")]
        fields: Vec<String>,
        /// Fields as Pump Up JSON (an array of Field objects), from a file or - for stdin
        #[arg(long, value_name = "FILE")]
        fields_json: Option<PathBuf>,
        /// What the form is about, as the human will read it
        #[arg(long, default_value = "Please fill in this form")]
        summary: String,
    },
}

/// How a run ended, before it becomes an exit code.
enum End {
    Decided(Value),
    TimedOut(String),
    /// The request was withdrawn from elsewhere (a reviewer dismissed it).
    Withdrawn,
}

/// The request a run created, for Ctrl-C to withdraw.
struct Created {
    agent: Arc<Agent>,
    kind: RequestKind,
    id: String,
}

pub async fn run(home: Option<PathBuf>, args: AskArgs) -> anyhow::Result<ExitCode> {
    let json = args.common.json;
    let keep = args.common.keep;
    let created: Arc<OnceLock<Created>> = Arc::default();
    let work = ask(home, args, created.clone());
    tokio::pin!(work);
    let outcome = tokio::select! {
        r = &mut work => r,
        _ = tokio::signal::ctrl_c() => {
            match created.get() {
                Some(c) if !keep => {
                    let done = tokio::time::timeout(
                        WITHDRAW_ON_EXIT,
                        c.agent.withdraw(c.kind, &c.id, "tern ask was interrupted"),
                    )
                    .await;
                    match done {
                        Ok(Ok(())) => eprintln!("tern ask: interrupted; request {} withdrawn", c.id),
                        Ok(Err(f)) => eprintln!(
                            "tern ask: interrupted; request {} could not be withdrawn: {}",
                            c.id,
                            f.message()
                        ),
                        Err(_) => eprintln!(
                            "tern ask: interrupted; request {} could not be withdrawn in time",
                            c.id
                        ),
                    }
                }
                Some(c) => eprintln!("tern ask: interrupted; request {} stays pending (--keep)", c.id),
                None => eprintln!("tern ask: interrupted before a request was created"),
            }
            // Exit at once: a blocking read of stdin (--fields-json -) would otherwise hold
            // the runtime's shutdown.
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
            std::process::exit(i32::from(crate::exit::EXIT_INTERRUPTED));
        }
    };
    Ok(match outcome {
        Ok(code) => code,
        Err(f) => {
            let f = as_agent(f);
            if json {
                print_json(&json!({"error": f.message()}));
            }
            eprintln!("error: {}", f.message());
            ExitCode::from(match f {
                Failure::Unreachable(_) => EXIT_UNREACHABLE,
                _ => EXIT_ERROR,
            })
        }
    })
}

/// tern ask speaks with an agent key, not a reviewer's token: a refused key is explained
/// as one (the shared [`Failure::message`] speaks to reviewers).
fn as_agent(f: Failure) -> Failure {
    match f {
        Failure::Http { status: 401, body } => {
            let said = body["error"]
                .as_str()
                .or_else(|| body["error"]["message"].as_str())
                .unwrap_or("no details");
            Failure::Other(format!(
                "the gateway did not accept the agent key (401: {said}); pass an agent API key \
                 with --key or TERN_API_KEY (create one with `tern keys create NAME`), or run \
                 without --key on the gateway's machine to use $TERN_HOME/gateway.key; a \
                 reviewer's token (tern_rv_…) is not an agent key"
            ))
        }
        other => other,
    }
}

/// The gateway as `tern ask` speaks to it: the Pump Up agent API ([`PumpUp`], the client
/// the waits' remote inbox uses too), its failures as this command's [`Failure`]s.
struct Agent {
    api: PumpUp,
}

impl Agent {
    /// A client of the gateway at `url` with the agent key `key`.
    fn new(url: &str, key: &str) -> Result<Self, Failure> {
        let url = url.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Failure::Usage(format!(
                "the gateway URL {url:?} must start with http:// or https://"
            )));
        }
        let api = PumpUp::new(url, key).map_err(|e| Failure::Other(e.to_string()))?;
        Ok(Agent { api })
    }

    fn failure(&self, e: ClientError) -> Failure {
        match e {
            ClientError::Refused { status, body } => Failure::Http { status, body },
            ClientError::Unreachable(cause) => Failure::Unreachable(format!(
                "cannot reach the gateway at {} ({cause}); is `tern gateway` running?",
                self.api.base_url()
            )),
        }
    }

    async fn get_json(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Failure> {
        let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.api
            .get_json(path, &query)
            .await
            .map_err(|e| self.failure(e))
    }

    async fn post_json(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Value, Failure> {
        self.api
            .post(path, body, idempotency_key)
            .await
            .map_err(|e| self.failure(e))
    }

    /// The request's result; `None` while it is pending.
    async fn result(&self, kind: RequestKind, id: &str) -> Result<Option<Value>, Failure> {
        self.api.result(kind, id).await.map_err(|e| self.failure(e))
    }

    /// Withdraws the request (`POST …/withdraw`), with `reason` on its timeline.
    async fn withdraw(&self, kind: RequestKind, id: &str, reason: &str) -> Result<(), Failure> {
        self.api
            .withdraw(kind, id, reason)
            .await
            .map_err(|e| self.failure(e))
    }
}

/// `approval` or `elicitation`, as the messages name a request.
fn kind_name(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Approval => "approval",
        RequestKind::Elicitation => "elicitation",
    }
}

async fn ask(
    home: Option<PathBuf>,
    args: AskArgs,
    created: Arc<OnceLock<Created>>,
) -> Result<ExitCode, Failure> {
    let c = &args.common;
    let context = parse_context(&c.context).map_err(Failure::Usage)?;
    let deadline = c.timeout.map(|t| Instant::now() + t);
    let base_key = c
        .idempotency_key
        .clone()
        .unwrap_or_else(|| format!("tern-ask-{}", uuid::Uuid::now_v7()));
    // What is asked: the summary, the request's kind, a form's fields, and what the wait
    // is for.
    let (summary, kind, fields, waiting_for) = match args.command {
        AskCommand::Approve { summary } => {
            if summary.trim().is_empty() {
                return Err(Failure::Usage("the summary is empty".into()));
            }
            (summary, RequestKind::Approval, None, "a decision on")
        }
        AskCommand::Form {
            fields,
            fields_json,
            summary,
        } => {
            let fields = form_fields(&fields, fields_json.as_deref())
                .await
                .map_err(Failure::Usage)?;
            (
                summary,
                RequestKind::Elicitation,
                Some(fields),
                "answers to",
            )
        }
    };
    let agent = Arc::new(agent(home, c).await?);
    let task_id = task_for(&agent, c, &summary, &base_key, deadline).await?;
    let mut body = json!({
        "projectName": c.project,
        "taskId": task_id,
        "summary": summary,
    });
    if let Some(fields) = &fields {
        body["fields"] = json!(fields);
    }
    if !context.is_empty() {
        body["keyValueContext"] = json!(context);
    }
    let name = kind_name(kind);
    let id = create(
        &agent,
        &format!("/api/{}", kind.path()),
        &body,
        &format!("{base_key}:{name}"),
        deadline,
    )
    .await?;
    // Set once, by this line only: Ctrl-C from now on withdraws this request.
    let _ = created.set(Created {
        agent: agent.clone(),
        kind,
        id: id.clone(),
    });
    eprintln!("tern ask: waiting for {waiting_for} {name} request {id}");
    let mut end = wait(
        &agent,
        kind,
        &id,
        c.poll_interval,
        deadline,
        c.gateway_timeout,
    )
    .await?;
    if let End::TimedOut(after) = &end
        && !c.keep
    {
        match agent
            .withdraw(kind, &id, &format!("tern ask timed out after {after}"))
            .await
        {
            Ok(()) => {}
            // Decided in the meantime: that decision stands, and is the answer.
            Err(Failure::Http { status: 409, .. }) => {
                if let Ok(Some(result)) = agent.result(kind, &id).await {
                    end = End::Decided(result);
                }
            }
            Err(f) => eprintln!(
                "tern ask: request {id} could not be withdrawn ({}); it stays pending",
                f.message()
            ),
        }
    }
    match end {
        End::TimedOut(after) => Ok(timed_out(&id, &after, c)),
        End::Withdrawn => {
            eprintln!("tern ask: request {id} was withdrawn in the inbox; nobody will decide it");
            if c.json {
                print_json(&json!({"requestId": id, "withdrawn": true}));
            }
            Ok(ExitCode::from(EXIT_OTHER_OUTCOME))
        }
        End::Decided(result) if fields.is_none() => Ok(print_decision(&result, c.json)),
        End::Decided(result) => {
            if c.json {
                print_json(&result);
            } else {
                let answers = result.get("fields").cloned().unwrap_or(json!({}));
                println!("{answers}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn timed_out(id: &str, after: &str, c: &Common) -> ExitCode {
    if c.keep {
        let again = match &c.idempotency_key {
            Some(k) => format!("; run again with --idempotency-key {k} to keep waiting for it"),
            None => String::new(),
        };
        eprintln!("tern ask: no decision after {after}; request {id} stays pending{again}");
    } else {
        eprintln!("tern ask: no decision after {after}; request {id} withdrawn");
    }
    if c.json {
        print_json(&json!({"requestId": id, "timedOut": true, "withdrawn": !c.keep}));
    }
    ExitCode::from(EXIT_TIMEOUT)
}

/// Prints an approval result and maps its outcome to the exit code.
fn print_decision(result: &Value, json: bool) -> ExitCode {
    let kind = result["outcome"]["type"].as_str().unwrap_or("?");
    if json {
        print_json(result);
    } else {
        let mut line = kind.to_owned();
        if let Some(by) = result["decidedBy"].as_str() {
            line.push_str(&format!(" by {by}"));
        }
        println!("{line}");
        if let Some(r) = result["outcome"]["reasonCode"].as_str() {
            println!("reason: {r}");
        }
        if let Some(n) = result["outcome"]["note"].as_str() {
            println!("note: {n}");
        }
    }
    match kind {
        "APPROVE" | "EDIT_AND_APPROVE" => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_OTHER_OUTCOME),
    }
}

// ---- connecting as an agent ---------------------------------------------------------------

async fn agent(home: Option<PathBuf>, c: &Common) -> Result<Agent, Failure> {
    let home_dir = Home::resolve(home.clone(), &context::env_var)
        .map_err(|e| Failure::Other(e.to_string()))?;
    let url = match &c.gateway {
        Some(u) => u.clone(),
        None => match AdminFile::read(&AdminFile::path(&home_dir)).await? {
            Some(a) => a.url,
            None => configured_url(home)?,
        },
    };
    let key = match c.key.clone().filter(|k| !k.is_empty()) {
        Some(k) => k,
        None => {
            let path = home_dir.root.join("gateway.key");
            match tokio::fs::read_to_string(&path).await {
                Ok(k) if !k.trim().is_empty() => k.trim().to_owned(),
                _ => context::env_var("TERN_SERVER_KEY")
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| {
                        Failure::Usage(format!(
                            "no agent key: pass --key or set TERN_API_KEY (create one with \
                             `tern keys create NAME`); {} does not exist",
                            path.display()
                        ))
                    })?,
            }
        }
    };
    Agent::new(&url, &key)
}

/// `http://` + the configured listen address, a wildcard address replaced by loopback.
fn configured_url(home: Option<PathBuf>) -> Result<String, Failure> {
    let (_, eff) = context::load_config(home).map_err(|e| Failure::Other(format!("{e:#}")))?;
    let listen = eff.config.gateway.listen.clone();
    let listen = listen
        .strip_prefix("0.0.0.0:")
        .map(|port| format!("127.0.0.1:{port}"))
        .or_else(|| {
            listen
                .strip_prefix("[::]:")
                .map(|port| format!("[::1]:{port}"))
        })
        .unwrap_or(listen);
    Ok(format!("http://{listen}"))
}

/// Connection failures and server-side trouble are worth waiting out; a 4xx is not.
fn transient(f: &Failure) -> bool {
    match f {
        Failure::Unreachable(_) => true,
        Failure::Http { status, .. } => *status >= 500 || *status == 429,
        _ => false,
    }
}

/// A POST that creates something, retried on transient failures with the same idempotency
/// key (so a retry after a lost response creates nothing new); returns the body.
async fn post_create(
    agent: &Agent,
    path: &str,
    body: &Value,
    key: &str,
    deadline: Option<Instant>,
) -> Result<Value, Failure> {
    let backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(4));
    let mut attempts = 0;
    loop {
        attempts += 1;
        let delay = backoff.delay(attempts);
        match agent.post_json(path, body, Some(key)).await {
            Ok(created) => return Ok(created),
            // A 429 on a create is a policy's rate limit, whose window is minutes or hours:
            // reported, not retried.
            Err(f)
                if transient(&f)
                    && !matches!(f, Failure::Http { status: 429, .. })
                    && attempts < 6
                    && !past(deadline, delay) =>
            {
                tracing::debug!(error = %f.message(), "retrying {path}");
                eprintln!("tern ask: {}; retrying", f.message());
                tokio::time::sleep(delay).await;
            }
            Err(f) => return Err(f),
        }
    }
}

fn past(deadline: Option<Instant>, after: Duration) -> bool {
    deadline.is_some_and(|d| Instant::now() + after >= d)
}

async fn create(
    agent: &Agent,
    path: &str,
    body: &Value,
    key: &str,
    deadline: Option<Instant>,
) -> Result<String, Failure> {
    let created = post_create(agent, path, body, key, deadline).await?;
    created["eventId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Failure::Other(format!("the gateway answered {path} without an eventId")))
}

/// The task to file the request under: with `--task`, the key's task of that name in the
/// project (created when there is none); else a new task named after the summary.
async fn task_for(
    agent: &Agent,
    c: &Common,
    summary: &str,
    base_key: &str,
    deadline: Option<Instant>,
) -> Result<String, Failure> {
    let name = match &c.task {
        Some(name) => {
            let projects = agent
                .get_json("/api/projects", &[("name", c.project.clone())])
                .await?;
            let project_id = projects["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == c.project.as_str())
                .and_then(|p| p["id"].as_str())
                .ok_or_else(|| {
                    Failure::Usage(format!(
                        "no project named {:?} (add it with `tern inbox projects add`)",
                        c.project
                    ))
                })?
                .to_owned();
            let tasks = agent
                .get_json(
                    "/api/tasks",
                    &[("projectId", project_id), ("name", name.clone())],
                )
                .await?;
            let existing = tasks["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["name"] == name.as_str() && t["status"] != "CLOSED")
                .and_then(|t| t["id"].as_str());
            if let Some(id) = existing {
                return Ok(id.to_owned());
            }
            name.clone()
        }
        None => {
            let one_line = summary.replace(['\n', '\r'], " ");
            let mut name: String = one_line.chars().take(80).collect();
            if one_line.chars().count() > 80 {
                name.push('…');
            }
            name
        }
    };
    let body = json!({"name": name, "projectName": c.project});
    let task = post_create(
        agent,
        "/api/tasks",
        &body,
        &format!("{base_key}:task"),
        deadline,
    )
    .await?;
    task["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Failure::Other("the gateway created a task without an id".into()))
}

/// Polls the request's result until it has one, or the deadline passes. 204 (pending) and
/// transient failures wait with a backoff that grows to `max_interval`; a transient failure
/// is reported once, not on every poll, and waited out for `give_up_after` at most. A 409
/// is the inbox saying the request was withdrawn.
async fn wait(
    agent: &Agent,
    kind: RequestKind,
    id: &str,
    max_interval: Duration,
    deadline: Option<Instant>,
    give_up_after: Duration,
) -> Result<End, Failure> {
    let started = Instant::now();
    let max_interval = max_interval.max(Duration::from_millis(50));
    let backoff = Backoff::new(Duration::from_millis(200).min(max_interval), max_interval);
    let mut polls = 0;
    let mut failing_since: Option<Instant> = None;
    loop {
        polls += 1;
        let delay = backoff.delay(polls);
        match agent.result(kind, id).await {
            Ok(Some(result)) => {
                if failing_since.is_some() {
                    eprintln!("tern ask: the gateway answers again");
                }
                return Ok(End::Decided(result));
            }
            Ok(None) => {
                if failing_since.take().is_some() {
                    eprintln!("tern ask: the gateway answers again");
                }
            }
            Err(Failure::Http { status: 409, .. }) => return Ok(End::Withdrawn),
            Err(f) if transient(&f) => match failing_since {
                None => {
                    eprintln!("tern ask: {}; still waiting", f.message());
                    failing_since = Some(Instant::now());
                }
                Some(since) if since.elapsed() >= give_up_after => {
                    return Err(Failure::Unreachable(format!(
                        "{}; gave up after {} (--gateway-timeout); the request stays in the \
                         inbox",
                        f.message(),
                        format_duration(since.elapsed())
                    )));
                }
                Some(_) => {}
            },
            Err(f) => return Err(f),
        }
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Ok(End::TimedOut(format_duration(started.elapsed())));
            }
            tokio::time::sleep(delay.min(d - now)).await;
        } else {
            tokio::time::sleep(delay).await;
        }
    }
}

// ---- parsing ------------------------------------------------------------------------------

fn parse_context(specs: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for s in specs {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--context {s:?}: write KEY=VALUE"))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("--context {s:?}: the key is empty"));
        }
        map.insert(k.to_owned(), v.to_owned());
    }
    Ok(map)
}

/// A bare number of seconds, or a duration as the configuration writes them
/// ([`tern_config::parse_duration`]: `90s`, `15m`, `2h`, `1h30m`, `500ms`, `1d`).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => tern_config::parse_duration(s),
    }
}

fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 3600 {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    } else if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The form's fields from `--field` specs and `--fields-json`, checked as the inbox will.
async fn form_fields(
    specs: &[String],
    json_path: Option<&std::path::Path>,
) -> Result<Vec<Field>, String> {
    let mut fields = Vec::new();
    if let Some(p) = json_path {
        let text = if p.as_os_str() == "-" {
            // Off the runtime's thread, so Ctrl-C is still handled while stdin is open.
            tokio::task::spawn_blocking(|| std::io::read_to_string(std::io::stdin()))
                .await
                .map_err(|e| format!("reading fields from stdin: {e}"))?
                .map_err(|e| format!("reading fields from stdin: {e}"))?
        } else {
            tokio::fs::read_to_string(p)
                .await
                .map_err(|e| format!("reading {}: {e}", p.display()))?
        };
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("--fields-json is not JSON: {e}"))?;
        // An array of fields, or an object holding one as `fields`.
        let list = match v {
            Value::Object(mut m) if m.contains_key("fields") => {
                m.remove("fields").unwrap_or_default()
            }
            other => other,
        };
        let parsed: Vec<Field> = serde_json::from_value(list)
            .map_err(|e| format!("--fields-json is not an array of Pump Up fields: {e}"))?;
        fields.extend(parsed);
    }
    for s in specs {
        fields.push(parse_field_spec(s)?);
    }
    if fields.is_empty() {
        return Err("a form needs at least one --field or --fields-json".into());
    }
    tern_inbox::validate_field_defs(&fields).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        format!("the fields are not usable:\n  {}", lines.join("\n  "))
    })?;
    Ok(fields)
}

/// `MIN..MAX/STEP` of a field spec, each part optional.
type SpecRange = (Option<String>, Option<String>, Option<String>);

/// One `ID[?][:KIND[ARGS]][:LABEL]` spec → a field (see `tern ask form --help`).
pub(crate) fn parse_field_spec(spec: &str) -> Result<Field, String> {
    let bad = |why: &str| format!("--field {spec:?}: {why}");
    let (id_part, rest) = match spec.split_once(':') {
        Some((i, r)) => (i, Some(r)),
        None => (spec, None),
    };
    let (id, required) = match id_part.trim().strip_suffix('?') {
        Some(i) => (i.trim(), false),
        None => (id_part.trim(), true),
    };
    if id.is_empty() {
        return Err(bad("the field needs an id"));
    }
    let (kind, args, label) = match rest {
        None => ("text".to_owned(), None, None),
        Some(r) => {
            let kind_end = r.find(['[', ':']).unwrap_or(r.len());
            let kind = r[..kind_end].trim().to_ascii_lowercase();
            let mut after = &r[kind_end..];
            let mut args = None;
            if let Some(a) = after.strip_prefix('[') {
                let close = a.find(']').ok_or_else(|| bad("a '[' without its ']'"))?;
                args = Some(a[..close].to_owned());
                after = &a[close + 1..];
            }
            let label = match after.strip_prefix(':') {
                Some(l) => Some(l.to_owned()),
                None if after.trim().is_empty() => None,
                None => return Err(bad(&format!("unexpected {after:?} after the kind"))),
            };
            let kind = if kind.is_empty() {
                "text".to_owned()
            } else {
                kind
            };
            (kind, args, label)
        }
    };
    let label = label
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| id.to_owned());
    let range = |a: &Option<String>| -> Result<SpecRange, String> {
        let Some(a) = a else {
            return Ok((None, None, None));
        };
        let (range, step) = match a.split_once('/') {
            Some((r, s)) => (r, Some(s.trim().to_owned())),
            None => (a.as_str(), None),
        };
        let (lo, hi) = range
            .split_once("..")
            .ok_or_else(|| bad("write the range as MIN..MAX (either end may be left out)"))?;
        let nonempty = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        Ok((nonempty(lo), nonempty(hi), step))
    };
    let num = |s: Option<String>| -> Result<Option<Value>, String> {
        s.map(|s| {
            s.parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| bad(&format!("{s:?} is not a number")))
        })
        .transpose()
    };
    let len = |s: Option<String>| -> Result<Option<Value>, String> {
        s.map(|s| {
            s.parse::<u64>()
                .map(Value::from)
                .map_err(|_| bad(&format!("{s:?} is not a length")))
        })
        .transpose()
    };
    let mut f = Map::new();
    f.insert("id".into(), json!(id));
    f.insert("label".into(), json!(label));
    f.insert("required".into(), json!(required));
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            f.insert(k.to_owned(), v);
        }
    };
    let no_args = |what: &str| -> Result<(), String> {
        if args.is_some() {
            Err(bad(&format!("{what} takes no [...]")))
        } else {
            Ok(())
        }
    };
    let type_name = match kind.as_str() {
        "text" | "email" | "url" | "phone" | "textarea" => {
            let (lo, hi, _) = range(&args)?;
            put("minLength", len(lo)?);
            put("maxLength", len(hi)?);
            match kind.as_str() {
                "textarea" => "TextArea",
                "text" => "Text",
                fmt => {
                    put("format", Some(json!(fmt.to_ascii_uppercase())));
                    "Text"
                }
            }
        }
        "number" | "integer" | "int" => {
            let (lo, hi, _) = range(&args)?;
            put("min", num(lo)?);
            put("max", num(hi)?);
            put("integerOnly", Some(json!(kind != "number")));
            "Number"
        }
        "slider" => {
            let (lo, hi, step) = range(&args)?;
            let (Some(lo), Some(hi)) = (num(lo)?, num(hi)?) else {
                return Err(bad(
                    "a slider needs both ends: slider[MIN..MAX] or slider[MIN..MAX/STEP]",
                ));
            };
            put("min", Some(lo));
            put("max", Some(hi));
            put("step", num(step)?);
            "Slider"
        }
        "switch" | "bool" | "boolean" => {
            no_args("a switch")?;
            "Switch"
        }
        "select" | "multiselect" => {
            let a = args
                .clone()
                .ok_or_else(|| bad("list the options: select[A|B|C]"))?;
            let sep = if a.contains('|') { '|' } else { ',' };
            let options: Vec<String> = a
                .split(sep)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            put("options", Some(json!(options)));
            if kind == "select" {
                "Select"
            } else {
                "Multiselect"
            }
        }
        "date" | "datetime" | "time" => {
            let (lo, hi, _) = range(&args)?;
            put("min", lo.map(Value::String));
            put("max", hi.map(Value::String));
            match kind.as_str() {
                "date" => "DateField",
                "datetime" => "DateTime",
                _ => "Time",
            }
        }
        other => {
            return Err(bad(&format!(
                "unknown kind {other:?} (text, email, url, phone, textarea, number, integer, \
                 slider, switch, select, multiselect, date, datetime, time)"
            )));
        }
    };
    f.insert("type".into(), json!(type_name));
    serde_json::from_value(Value::Object(f)).map_err(|e| bad(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> Value {
        serde_json::to_value(parse_field_spec(s).unwrap()).unwrap()
    }

    #[test]
    fn field_specs() {
        assert_eq!(
            spec("email:email:Your e-mail"),
            json!({"type": "Text", "id": "email", "label": "Your e-mail", "required": true, "format": "EMAIL"})
        );
        assert_eq!(
            spec("notes?:textarea[..200]"),
            json!({"type": "TextArea", "id": "notes", "label": "notes", "required": false, "maxLength": 200})
        );
        assert_eq!(
            spec("n:integer[1..]:How many?"),
            json!({"type": "Number", "id": "n", "label": "How many?", "required": true, "integerOnly": true, "min": 1.0})
        );
        assert_eq!(spec("s:slider[0..10/0.5]")["step"], json!(0.5));
        assert_eq!(
            spec("size:select[S|M|L]:Size: pick one")["options"],
            json!(["S", "M", "L"])
        );
        assert_eq!(
            spec("size:select[S|M|L]:Size: pick one")["label"],
            "Size: pick one"
        );
        assert_eq!(
            spec("when:time[09:00..17:00]:Meeting time"),
            json!({"type": "Time", "id": "when", "label": "Meeting time", "required": true, "min": "09:00", "max": "17:00"})
        );
        assert_eq!(spec("plain")["type"], "Text");
        assert_eq!(spec("d:date")["type"], "DateField");
        assert_eq!(spec("ok:switch")["type"], "Switch");
        for bad in [
            "",
            ":text",
            "x:colour",
            "x:slider[0..]",
            "x:select",
            "x:switch[1..2]",
            "x:number[a..b]",
            "x:text[1..2",
        ] {
            assert!(parse_field_spec(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        for bad in ["", "h", "2x", "-3s", "0s", "2 x"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn context_pairs() {
        let m = parse_context(&["a=1".into(), "b=x=y".into()]).unwrap();
        assert_eq!(m["b"], "x=y");
        assert!(parse_context(&["nokey".into()]).is_err());
        assert!(parse_context(&["=v".into()]).is_err());
    }
}
