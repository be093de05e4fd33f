//! `tern cron …`: scheduled jobs from the shell — add, list, show, edit, pause, resume, run,
//! stop, remove, history.
//!
//! When a gateway runs on this `$TERN_HOME` (`gateway.json` names a live process), every
//! command goes through its API (`/api/cron/jobs…`, with `gateway.key` or `TERN_SERVER_KEY`):
//! its scheduler is woken by each change, and only it can start or stop a run. Without one,
//! the store is changed directly through `tern_cron::jobs`, the same checks and views the API
//! uses, so `--json` prints the same shapes either way; `run` and `stop` then fail, since
//! nothing would run the job. A job the CLI makes is `created_by: cli` and owned by no key
//! (admin keys see it).
//!
//! A JOB argument is a job's id, a unique prefix of one, or a job's exact name.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::{Value, json};
use tern_config::{Effective, Home};
use tern_cron::jobs::{self, Creator, JobFields};
use tern_store::Store;
use tern_store::cron::{CronCatchUp, CronCreator, CronOverlap};

use crate::context;

#[derive(Debug, Args)]
pub struct CronArgs {
    #[command(subcommand)]
    pub command: CronCommand,
}

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Add a job: `tern cron add 'every 2h' 'check the deploy'`; prints its id
    Add {
        /// `30m` (once), `every 2h`, `0 9 * * 1-5`, `TZ=Europe/Paris 0 9 * * *`, an ISO time
        schedule: String,
        /// What the agent is asked each run (not needed with --script)
        prompt: Option<String>,
        #[command(flatten)]
        options: JobOptions,
        /// Print the job as JSON instead of its id
        #[arg(long)]
        json: bool,
    },
    /// List the jobs: schedule, state, next run, last outcome
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show a job and its last runs
    Show {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Change a job's fields (those given)
    Edit {
        job: String,
        /// A new schedule, from now
        #[arg(long)]
        schedule: Option<String>,
        #[arg(long)]
        prompt: Option<String>,
        #[command(flatten)]
        options: JobOptions,
        #[arg(long)]
        json: bool,
    },
    /// Pause a job: no occurrence comes due until it is resumed
    Pause {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Resume a job from its next occurrence after now
    Resume {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Run a job now, by hand (needs a running gateway)
    Run {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop a job's runs going now (needs a running gateway)
    Stop {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a job; its history stays
    Remove {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Every occurrence of a job, newest first: ran (outcome, session), skipped (why), interrupted
    History {
        job: String,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
}

/// The fields `add` and `edit` share.
#[derive(Debug, Args, Default)]
pub struct JobOptions {
    #[arg(long)]
    name: Option<String>,
    /// A command run with `bash -c` and no model; its output is the result
    #[arg(long)]
    script: Option<String>,
    /// Run in this session (its history accumulates); default: a new session per run
    #[arg(long)]
    session: Option<String>,
    /// The runs' toolsets, comma-separated; default: the gateway's
    #[arg(long, value_delimiter = ',')]
    toolsets: Option<Vec<String>>,
    /// The longest a run may take (`10m`)
    #[arg(long)]
    timeout: Option<String>,
    /// `none`, `chat`, CHANNEL:CHAT_ID[:THREAD_ID] or an http(s):// webhook URL
    #[arg(long)]
    deliver: Option<String>,
    /// Occurrences missed while the gateway was down
    #[arg(long, value_enum)]
    catch_up: Option<CatchUpArg>,
    /// How late a missed occurrence may still be caught up (`6h`)
    #[arg(long)]
    grace: Option<String>,
    /// An occurrence that comes while the previous run goes on
    #[arg(long, value_enum)]
    overlap: Option<OverlapArg>,
    /// Run an occurrence cut short by a crash once more at the next start
    #[arg(long)]
    retry_interrupted: bool,
    /// Create it paused (edit: pause it)
    #[arg(long)]
    paused: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CatchUpArg {
    One,
    All,
    None,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OverlapArg {
    Skip,
    Queue,
}

impl JobOptions {
    fn fields(self, schedule: Option<String>, prompt: Option<String>) -> JobFields {
        JobFields {
            schedule,
            prompt,
            name: self.name,
            script: self.script,
            session: self.session,
            toolsets: self.toolsets,
            timeout: self.timeout,
            deliver: self.deliver,
            catch_up: self.catch_up.map(|c| match c {
                CatchUpArg::One => CronCatchUp::One,
                CatchUpArg::All => CronCatchUp::All,
                CatchUpArg::None => CronCatchUp::None,
            }),
            grace: self.grace,
            overlap: self.overlap.map(|o| match o {
                OverlapArg::Skip => CronOverlap::Skip,
                OverlapArg::Queue => CronOverlap::Queue,
            }),
            retry_interrupted: self.retry_interrupted.then_some(true),
            paused: self.paused.then_some(true),
        }
    }
}

/// Where the jobs are: the running gateway's API, or the store itself.
enum Backend {
    Api(Api),
    Store { store: Store, tz: TimeZone },
}

/// The running gateway's API, with an admin key of this home.
struct Api {
    client: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(|e| {
            anyhow!(
                "cannot reach the gateway at {} ({}); is `tern gateway` still running?",
                self.base,
                crate::exit::error_chain(&anyhow::Error::from(e))
            )
        })?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .with_context(|| format!("reading the answer of the gateway at {}", self.base))?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(v);
        }
        let said = v["error"]["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_owned());
        bail!("{said} (the gateway at {} answered {status})", self.base)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path, body).await
    }
}

/// The gateway running on `home`, if one serves agents there; else the store.
async fn backend(home: &Home, eff: &Effective) -> anyhow::Result<Backend> {
    if let Some(g) = crate::status::running_gateway(home)?
        && !g.inbox_only
    {
        let key = match tokio::fs::read_to_string(home.root.join("gateway.key")).await {
            Ok(k) if !k.trim().is_empty() => Some(k.trim().to_owned()),
            _ => context::env_var("TERN_SERVER_KEY").filter(|k| !k.trim().is_empty()),
        };
        let Some(key) = key else {
            bail!(
                "a gateway runs at {} on this TERN_HOME, but there is no API key to ask it with \
                 (no {} and no TERN_SERVER_KEY); use its API (/api/cron/jobs) with an admin key",
                g.url,
                home.root.join("gateway.key").display()
            );
        };
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        return Ok(Backend::Api(Api {
            client,
            base: g.url.trim_end_matches('/').to_owned(),
            key,
        }));
    }
    let tz = match &eff.config.cron.timezone {
        Some(name) => TimeZone::get(name).map_err(|e| {
            anyhow!("[cron] timezone {name:?} is not a time zone this machine knows: {e}")
        })?,
        None => TimeZone::system(),
    };
    Ok(Backend::Store {
        store: context::open_store(home).await?,
        tz,
    })
}

const NO_GATEWAY: &str = "no gateway is running on this home";

impl Backend {
    async fn close(self) {
        if let Backend::Store { store, .. } = self {
            store.close().await;
        }
    }

    /// Every job, as the API shows them.
    async fn list(&self) -> anyhow::Result<Vec<Value>> {
        match self {
            Backend::Api(api) => {
                let v = api.get("/api/cron/jobs").await?;
                Ok(v["data"].as_array().cloned().unwrap_or_default())
            }
            Backend::Store { store, .. } => Ok(store
                .list_cron_jobs(None)
                .await?
                .iter()
                .map(jobs::job_view)
                .collect()),
        }
    }

    /// The id of the job `arg` names: an id, a unique id prefix, or an exact name — in that
    /// order, so a job named like another's id prefix (an agent key names its own jobs) never
    /// takes its place.
    async fn resolve(&self, arg: &str) -> anyhow::Result<String> {
        let all = self.list().await?;
        let id_of = |j: &Value| j["id"].as_str().unwrap_or_default().to_owned();
        if let Some(j) = all.iter().find(|j| j["id"] == arg) {
            return Ok(id_of(j));
        }
        let prefixed: Vec<&Value> = all
            .iter()
            .filter(|j| !arg.is_empty() && j["id"].as_str().is_some_and(|i| i.starts_with(arg)))
            .collect();
        match prefixed.as_slice() {
            [one] => return Ok(id_of(one)),
            [] => {}
            many => bail!(
                "{arg:?} is the start of {} jobs' ids: {}; give more of it",
                many.len(),
                many.iter().map(|j| id_of(j)).collect::<Vec<_>>().join(", ")
            ),
        }
        let named: Vec<&Value> = all.iter().filter(|j| j["name"] == arg).collect();
        match named.as_slice() {
            [one] => Ok(id_of(one)),
            [] => bail!("no scheduled job {arg:?} (`tern cron list` shows them)"),
            many => bail!(
                "{} jobs are named {arg:?}: {}; give the id",
                many.len(),
                many.iter().map(|j| id_of(j)).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    async fn create(&self, fields: &JobFields) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => api.post("/api/cron/jobs", Some(&json!(fields))).await,
            Backend::Store { store, tz } => {
                let creator = Creator {
                    created_by: CronCreator::Cli,
                    owner_key: None,
                    session: None,
                };
                let job = jobs::create(store, fields, &creator, Timestamp::now(), tz).await?;
                Ok(jobs::job_view(&job))
            }
        }
    }

    async fn show(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => api.get(&format!("/api/cron/jobs/{id}")).await,
            Backend::Store { store, .. } => {
                let job = store
                    .cron_job(id)
                    .await?
                    .ok_or_else(|| anyhow!("no scheduled job {id}"))?;
                let running = store.cron_running(id).await?;
                let recent = store.cron_history(id, 10).await?;
                let mut v = jobs::job_view(&job);
                v["running"] = running.iter().map(jobs::occurrence_view).collect();
                v["recent"] = recent.iter().map(jobs::occurrence_view).collect();
                Ok(v)
            }
        }
    }

    async fn update(&self, id: &str, fields: &JobFields) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => {
                api.call(
                    reqwest::Method::PATCH,
                    &format!("/api/cron/jobs/{id}"),
                    Some(&json!(fields)),
                )
                .await
            }
            Backend::Store { store, tz } => Ok(jobs::job_view(
                &jobs::update(store, id, fields, Timestamp::now(), tz).await?,
            )),
        }
    }

    async fn pause(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => api.post(&format!("/api/cron/jobs/{id}/pause"), None).await,
            Backend::Store { store, .. } => Ok(jobs::job_view(&jobs::pause(store, id).await?)),
        }
    }

    async fn resume(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => api.post(&format!("/api/cron/jobs/{id}/resume"), None).await,
            Backend::Store { store, .. } => Ok(jobs::job_view(
                &jobs::resume(store, id, Timestamp::now()).await?,
            )),
        }
    }

    async fn run(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => api.post(&format!("/api/cron/jobs/{id}/run"), None).await,
            Backend::Store { .. } => {
                bail!("{NO_GATEWAY}: `tern cron run` needs one (start `tern gateway`)")
            }
        }
    }

    async fn stop(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => api.post(&format!("/api/cron/jobs/{id}/stop"), None).await,
            Backend::Store { .. } => {
                bail!("{NO_GATEWAY}: `tern cron stop` needs one, and without one no run is going")
            }
        }
    }

    async fn remove(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => {
                api.call(
                    reqwest::Method::DELETE,
                    &format!("/api/cron/jobs/{id}"),
                    None,
                )
                .await
            }
            Backend::Store { store, .. } => {
                if !store.delete_cron_job(id).await? {
                    bail!("no scheduled job {id}");
                }
                Ok(json!({"id": id, "deleted": true}))
            }
        }
    }

    async fn history(&self, id: &str, limit: i64) -> anyhow::Result<Value> {
        match self {
            Backend::Api(api) => {
                api.get(&format!("/api/cron/jobs/{id}/history?limit={limit}"))
                    .await
            }
            Backend::Store { store, .. } => {
                if !(1..=1000).contains(&limit) {
                    bail!("--limit must be between 1 and 1000 (got {limit})");
                }
                if store.cron_job(id).await?.is_none() {
                    bail!("no scheduled job {id}");
                }
                let list = store.cron_history(id, limit).await?;
                Ok(json!({
                    "object": "list",
                    "data": list.iter().map(jobs::occurrence_view).collect::<Vec<_>>(),
                }))
            }
        }
    }
}

pub async fn run(home: Option<PathBuf>, args: CronArgs) -> anyhow::Result<ExitCode> {
    let (home, eff) = context::load_config(home)?;
    let backend = backend(&home, &eff).await?;
    let result = dispatch(&backend, args.command).await;
    backend.close().await;
    result.map(|()| ExitCode::SUCCESS)
}

fn print_json(v: &Value) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(v)?)?;
    Ok(())
}

fn print_line(line: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", clean(line))?;
    Ok(())
}

/// `text` safe for a terminal: a job's name, prompt or script may come from an agent key, so
/// control characters (escape sequences) and bidi overrides are written out as `\u{…}`.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if (c.is_control() && c != '\n' && c != '\t') || bidi {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

async fn dispatch(b: &Backend, cmd: CronCommand) -> anyhow::Result<()> {
    match cmd {
        CronCommand::Add {
            schedule,
            prompt,
            options,
            json,
        } => {
            let job = b.create(&options.fields(Some(schedule), prompt)).await?;
            eprintln!("added job {}: {}", label(&job), next_line(&job));
            if json {
                print_json(&job)
            } else {
                print_line(job["id"].as_str().unwrap_or_default())
            }
        }
        CronCommand::List { json } => {
            let all = b.list().await?;
            if json {
                return print_json(&json!({"object": "list", "data": all}));
            }
            if all.is_empty() {
                eprintln!("no scheduled jobs (add one with `tern cron add SCHEDULE PROMPT`)");
                return Ok(());
            }
            let mut lines = vec![format!(
                "{:<32}  {:<20}  {:<20}  {:<9}  {:<22}  LAST",
                "ID", "NAME", "SCHEDULE", "STATE", "NEXT RUN"
            )];
            for j in &all {
                let id = j["id"].as_str().unwrap_or_default();
                let last = b.history(id, 1).await?;
                let last = last["data"]
                    .get(0)
                    .map(occurrence_summary)
                    .unwrap_or_else(|| "-".to_owned());
                lines.push(format!(
                    "{:<32}  {:<20}  {:<20}  {:<9}  {:<22}  {last}",
                    // Whole: ids are time-ordered (UUIDv7), so jobs made together share
                    // their first dozen characters.
                    id,
                    cut(j["name"].as_str().unwrap_or("-"), 20),
                    cut(j["schedule"].as_str().unwrap_or_default(), 20),
                    j["state"].as_str().unwrap_or_default(),
                    local(&j["next_run_at"]),
                ));
            }
            print_line(&lines.join("\n"))
        }
        CronCommand::Show { job, json } => {
            let id = b.resolve(&job).await?;
            let v = b.show(&id).await?;
            if json {
                return print_json(&v);
            }
            print_line(&show_text(&v))
        }
        CronCommand::Edit {
            job,
            schedule,
            prompt,
            options,
            json,
        } => {
            let id = b.resolve(&job).await?;
            let fields = options.fields(schedule, prompt);
            if fields == JobFields::default() {
                bail!("nothing to change: give the fields to change (`tern cron edit --help`)");
            }
            let v = b.update(&id, &fields).await?;
            eprintln!("updated job {}: {}", label(&v), next_line(&v));
            if json { print_json(&v) } else { Ok(()) }
        }
        CronCommand::Pause { job, json } => {
            let id = b.resolve(&job).await?;
            let v = b.pause(&id).await?;
            eprintln!("paused job {}", label(&v));
            if json { print_json(&v) } else { Ok(()) }
        }
        CronCommand::Resume { job, json } => {
            let id = b.resolve(&job).await?;
            let v = b.resume(&id).await?;
            eprintln!("resumed job {}: {}", label(&v), next_line(&v));
            if json { print_json(&v) } else { Ok(()) }
        }
        CronCommand::Run { job, json } => {
            let id = b.resolve(&job).await?;
            let v = b.run(&id).await?;
            eprintln!(
                "started a run of job {}; `tern cron history {}` shows how it ends",
                label(&v["job"]),
                id
            );
            if json { print_json(&v) } else { Ok(()) }
        }
        CronCommand::Stop { job, json } => {
            let id = b.resolve(&job).await?;
            let v = b.stop(&id).await?;
            eprintln!("stopped {} run(s) of job {id}", v["stopped"]);
            if json { print_json(&v) } else { Ok(()) }
        }
        CronCommand::Remove { job, json } => {
            let id = b.resolve(&job).await?;
            let v = b.remove(&id).await?;
            eprintln!("removed job {id} (its history stays)");
            if json { print_json(&v) } else { Ok(()) }
        }
        CronCommand::History { job, limit, json } => {
            let id = b.resolve(&job).await?;
            let v = b.history(&id, limit).await?;
            if json {
                return print_json(&v);
            }
            let data = v["data"].as_array().cloned().unwrap_or_default();
            if data.is_empty() {
                eprintln!("job {id} has not come due yet");
                return Ok(());
            }
            let lines: Vec<String> = data.iter().map(history_line).collect();
            print_line(&lines.join("\n"))
        }
    }
}

/// A job for people: its name and id, or its id.
fn label(job: &Value) -> String {
    let id = job["id"].as_str().unwrap_or_default();
    match job["name"].as_str() {
        Some(n) => clean(&format!("{id} ({n})")),
        None => id.to_owned(),
    }
}

/// When a job runs next, in words.
fn next_line(job: &Value) -> String {
    match job["state"].as_str() {
        Some("paused") => "paused".to_owned(),
        Some("retired") => "it will not run again".to_owned(),
        _ => format!("next run {}", local(&job["next_run_at"])),
    }
}

/// An RFC 3339 time of the API in this machine's zone (`-` for none).
fn local(v: &Value) -> String {
    v.as_str()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map(|t| {
            t.to_zoned_datetime(TimeZone::system())
                .strftime("%Y-%m-%d %H:%M %Z")
                .to_string()
        })
        .unwrap_or_else(|| "-".to_owned())
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// An occurrence's state with its outcome or reason: `ran: completed`, `skipped: …`.
fn occurrence_summary(o: &Value) -> String {
    let state = o["state"].as_str().unwrap_or_default();
    match o["outcome"].as_str().or_else(|| o["reason"].as_str()) {
        Some(why) => format!("{state}: {why}"),
        None => state.to_owned(),
    }
}

/// One line of `history`: time, state, outcome or reason, session.
fn history_line(o: &Value) -> String {
    let manual = if o["trigger"] == "manual" {
        " (by hand)"
    } else {
        ""
    };
    let session = o["session_id"]
        .as_str()
        .map(|s| format!("  session {s}"))
        .unwrap_or_default();
    format!(
        "{}  {}{manual}{session}",
        local(&o["scheduled_at"]),
        occurrence_summary(o)
    )
}

fn show_text(v: &Value) -> String {
    let mut lines = vec![format!("job       {}", label(v))];
    let mut field = |name: &str, value: String| lines.push(format!("{name:<9} {value}"));
    field(
        "schedule",
        v["schedule"].as_str().unwrap_or_default().into(),
    );
    field("state", next_state(v));
    field("kind", v["kind"].as_str().unwrap_or_default().into());
    if let Some(s) = v["script"].as_str() {
        field("script", s.into());
    }
    if let Some(p) = v["prompt"].as_str().filter(|p| !p.is_empty()) {
        field("prompt", p.into());
    }
    field(
        "session",
        v["session"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| "a new one per run".into()),
    );
    field(
        "toolsets",
        v["toolsets"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|| "the gateway's".into()),
    );
    field("timeout", format!("{}s", v["timeout_secs"]));
    field("deliver", v["deliver"].as_str().unwrap_or_default().into());
    field(
        "policies",
        format!(
            "catch-up {}, grace {}s, overlap {}{}",
            v["catch_up"].as_str().unwrap_or_default(),
            v["grace_secs"],
            v["overlap"].as_str().unwrap_or_default(),
            if v["retry_interrupted"] == true {
                ", retry interrupted"
            } else {
                ""
            }
        ),
    );
    field(
        "created",
        format!(
            "{} by {}",
            local(&v["created_at"]),
            v["created_by"].as_str().unwrap_or_default()
        ),
    );
    let running = v["running"].as_array().cloned().unwrap_or_default();
    let recent = v["recent"].as_array().cloned().unwrap_or_default();
    if !running.is_empty() {
        lines.push(format!("running now: {}", running.len()));
    }
    if recent.is_empty() {
        lines.push("no runs yet".into());
    } else {
        lines.push("last runs:".into());
        lines.extend(recent.iter().map(|o| format!("  {}", history_line(o))));
    }
    lines.join("\n")
}

/// The state with the next run: `scheduled, next run 2026-11-26 10:00 CET`.
fn next_state(v: &Value) -> String {
    match v["state"].as_str() {
        Some("scheduled") => format!("scheduled, {}", next_line(v)),
        Some(s) => s.to_owned(),
        None => "?".to_owned(),
    }
}
