//! The durable inbox service: projects, tasks, requests, decisions and the event log on the
//! session store's database (tables from `0003_inbox.sql` in `tern-store`). It decides what
//! to read and write and in which transaction; the statements themselves are in
//! [`crate::store`].
//!
//! # The flow at a glance
//!
//! 1. An agent opens a task in a project ([`Inbox::create_task`]): the task starts in the
//!    project's initial step, `RUNNING`, and the log gets `TASK_CREATED`.
//! 2. It opens a request ([`Inbox::create_approval`], [`Inbox::create_elicitation`]): the
//!    `*_REQUESTED` event's id is the request id, a `pending` request row holds what the
//!    human will see, and the task turns `WAITING`. The agent gets `{eventId}` at once.
//! 3. It polls [`Inbox::approval_result`] / [`Inbox::elicitation_result`]: `None` while
//!    pending (HTTP 204), the result once decided.
//! 4. A human decides ([`Inbox::decide_approval`]) or answers
//!    ([`Inbox::answer_elicitation`], checked by [`crate::validate_answers`]): the result is
//!    stored, `APPROVAL_DECIDED` / `ELICITATION_PROVIDED` is logged with `inResponseTo` = the
//!    request id, and the task is `RUNNING` again once no other request of it is pending.
//!    A request is decided once: a second decision is [`InboxError::AlreadyDecided`].
//! 5. Along the way the agent logs actions, exceptions and notes ([`Inbox::record_action`],
//!    [`Inbox::report_exception`], [`Inbox::add_note`]), which may move the task to another
//!    step and patch its metadata; anyone may read the log ([`Inbox::task_events`]).
//! 6. An agent that no longer needs an answer withdraws its pending request
//!    ([`Inbox::withdraw_request`], tern's extension; see the `withdraw` module).
//!
//! # Guarantees
//!
//! - **One transaction per write**, begun with `BEGIN IMMEDIATE` ([`crate::store::write`]):
//!   SQLite's write lock is taken before the first read, so what a write checks cannot change before it commits,
//!   and concurrent writers wait for each other (the store's busy timeout) instead of
//!   failing on a stale snapshot.
//! - **Decide once**: the decision is a conditional `UPDATE … WHERE status = 'pending'`
//!   whose row count is checked, so of two racing decisions exactly one wins, also on a
//!   database without `BEGIN IMMEDIATE`.
//! - **Idempotency**: a create with an `Idempotency-Key` first claims `(agent key, key)` with
//!   `INSERT … ON CONFLICT DO NOTHING`, in the transaction that then creates the task or
//!   event and stores the response. A repeat — later, after a decision, or concurrent —
//!   finds the claim and gets the original response; nothing new is created. The claim
//!   records a fingerprint of the request (SHA-256 of its canonical JSON): the same key with
//!   a different request is [`InboxError::IdempotencyKeyReused`] and creates nothing. A
//!   failed create rolls back its claim, so the key can be retried.
//! - **Ownership**: a task belongs to the agent key that created it; other keys get
//!   [`InboxError::NotFound`] for it, its events and its requests.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tern_store::{Store, now_ms};

use crate::error::InboxError;
pub use crate::error::Result;
use crate::fields::{validate_answers, validate_field_defs};
use crate::idempotency::{IdemKey, claim_key, remember_response};
use crate::model::{
    Actor, AddNote, ApprovalRequest, Attachment, CreateApproval, CreateElicitation, CreateTask,
    ElicitationRequest, EventId, EventType, ItemList, MetadataPatch, OpenRequest, Payload, Project,
    RecordAction, ReportException, Step, Steps, Task, TaskDetail, TaskEvents, TaskFilter,
    TaskStatus,
};
use crate::outcome::{ApprovalResult, AuthoritySnapshot, ElicitationResult, Outcome, Timestamp};
use crate::store::events::NewEvent;
use crate::store::{self, Conn, Tx, from_json, new_id, to_json};

/// The project every installation has, for agents that do not model workflows: one step,
/// owned by the agent.
pub const DEFAULT_PROJECT: &str = "default";

/// The most events one page of [`Inbox::task_events`] returns, and the default.
pub const MAX_EVENTS_PAGE: u32 = 100;
const DEFAULT_EVENTS_PAGE: u32 = 50;

// The method and path each create answers, recorded with its idempotency key.
const POST_TASKS: &str = "POST api/tasks";
const POST_APPROVALS: &str = "POST api/approval-requests";
const POST_ELICITATIONS: &str = "POST api/elicitation-requests";
const POST_ACTIONS: &str = "POST api/agent-actions";
const POST_EXCEPTIONS: &str = "POST api/exceptions";
const POST_NOTES: &str = "POST api/notes";

/// The inbox service. Cheap to clone (the store is a connection pool); clones share one
/// change feed.
#[derive(Clone, Debug)]
pub struct Inbox {
    store: Store,
    changes: tokio::sync::broadcast::Sender<review::Change>,
    /// Applied when requests are created ([`crate::policy`]).
    pub(crate) policy: std::sync::Arc<crate::policy::Policy>,
    /// Told about new requests ([`crate::notify`]).
    pub(crate) notifications: std::sync::Arc<crate::notify::Notifications>,
    /// Wakes the expiry sweeper when a request with an expiry time is created
    /// ([`Inbox::expiry_woken`]).
    expiry_wake: std::sync::Arc<tokio::sync::Notify>,
}

/// How many changes a slow subscriber of [`Inbox::changes`] may fall behind before it
/// misses some (it then sees `Lagged` and should reload what it shows).
const CHANGE_FEED_CAPACITY: usize = 256;

/// Which of the two request kinds; stored in `inbox_requests.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Approval,
    Elicitation,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Approval => "approval",
            Kind::Elicitation => "elicitation",
        }
    }

    fn what(self, id: &str) -> String {
        match self {
            Kind::Approval => format!("approval request {id}"),
            Kind::Elicitation => format!("elicitation request {id}"),
        }
    }
}

/// What the three log-only creates (action, exception, note) have in common.
struct AgentEvent<'a> {
    method_path: &'static str,
    project_name: &'a str,
    task_id: &'a str,
    transitions_to: Option<&'a str>,
    metadata_patch: Option<&'a MetadataPatch>,
    add_attachments: Option<&'a [Attachment]>,
    event: NewEvent<'a>,
}

impl<'a> AgentEvent<'a> {
    /// The agent's `event_type` event on a task, traced as `trace_id`, that moves, patches
    /// and attaches nothing; a create that does more sets those fields.
    fn new(
        method_path: &'static str,
        project_name: &'a str,
        task_id: &'a str,
        trace_id: Option<&'a str>,
        event_type: EventType,
        payload: Payload,
    ) -> Self {
        let mut event = NewEvent::new(event_type, Actor::Agent, payload);
        event.external_trace_id = trace_id;
        AgentEvent {
            method_path,
            project_name,
            task_id,
            transitions_to: None,
            metadata_patch: None,
            add_attachments: None,
            event,
        }
    }
}

impl Inbox {
    pub fn new(store: Store) -> Self {
        let (changes, _) = tokio::sync::broadcast::channel(CHANGE_FEED_CAPACITY);
        Inbox {
            store,
            changes,
            policy: Default::default(),
            notifications: Default::default(),
            expiry_wake: Default::default(),
        }
    }

    /// Subscribes to requests being created and decided, from now on; for live views. The
    /// feed is best-effort (in memory, this process only): the database stays the truth.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<review::Change> {
        self.changes.subscribe()
    }

    /// Tells subscribers about a committed change; nobody listening is fine.
    pub(crate) fn announce(&self, request_id: &str, what: review::ChangeKind) {
        let _ = self.changes.send(review::Change {
            request_id: request_id.to_owned(),
            what,
        });
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Begins a write transaction holding the database's write lock (see the module docs).
    pub(crate) async fn begin(&self) -> Result<Tx> {
        Ok(store::write(&self.store).await?)
    }

    /// This inbox with `policy` applied to every request created from now on.
    pub fn with_policy(mut self, policy: crate::policy::Policy) -> Self {
        self.policy = std::sync::Arc::new(policy);
        self
    }

    pub fn policy(&self) -> &crate::policy::Policy {
        &self.policy
    }

    /// This inbox announcing new requests to `notifications`' targets.
    pub fn with_notifications(mut self, notifications: crate::notify::Notifications) -> Self {
        self.notifications = std::sync::Arc::new(notifications);
        self
    }

    pub fn notifications(&self) -> &crate::notify::Notifications {
        &self.notifications
    }

    /// Begins the transaction of a decision on a request of `kind`. An overdue request is
    /// expired first — committed, announced, and the decision refused as
    /// [`InboxError::AlreadyDecided`]: the expiry came first, whether or not the sweeper
    /// has run yet.
    async fn begin_decision(&self, request_id: &str, kind: Kind) -> Result<Tx> {
        let mut tx = self.begin().await?;
        if self
            .expire_if_overdue(&mut tx, request_id, Some(kind))
            .await?
        {
            tx.commit().await?;
            self.announce(request_id, review::ChangeKind::Decided);
            return Err(InboxError::AlreadyDecided);
        }
        Ok(tx)
    }

    // ---- projects -------------------------------------------------------------------------

    /// Creates the [`DEFAULT_PROJECT`] unless it exists; returns it either way.
    pub async fn ensure_default_project(&self) -> Result<Project> {
        let mut tx = self.begin().await?;
        if let Some(project) = store::projects::by_name(&mut tx, DEFAULT_PROJECT).await? {
            return Ok(project);
        }
        let steps = Steps {
            initial_step: DEFAULT_PROJECT.to_owned(),
            steps: vec![Step {
                name: DEFAULT_PROJECT.to_owned(),
                owner: Actor::Agent,
                exits: None,
            }],
            step_schemas: None,
        };
        let project = store::projects::insert(&mut tx, DEFAULT_PROJECT, steps).await?;
        tx.commit().await?;
        Ok(project)
    }

    /// Creates a project. Its name must be new; its steps must be consistent (unique names,
    /// the initial step and every exit among them).
    pub async fn add_project(&self, name: &str, steps: Steps) -> Result<Project> {
        require_text("name", name)?;
        check_steps(&steps)?;
        let mut tx = self.begin().await?;
        if store::projects::by_name(&mut tx, name).await?.is_some() {
            return Err(InboxError::Invalid {
                code: "project_exists",
                message: format!("a project named {name:?} already exists"),
            });
        }
        let project = store::projects::insert(&mut tx, name, steps).await?;
        tx.commit().await?;
        Ok(project)
    }

    /// All projects, by name; `name` keeps those whose name contains it, ignoring case.
    pub async fn projects(&self, name: Option<&str>) -> Result<ItemList<Project>> {
        let mut conn = store::read(&self.store).await?;
        let all = store::projects::all(&mut conn).await?;
        let needle = name.map(str::to_lowercase);
        let mut items = Vec::new();
        for project in all {
            if needle
                .as_deref()
                .is_none_or(|n| project.name.to_lowercase().contains(n))
            {
                items.push(project);
            }
        }
        Ok(ItemList { items })
    }

    pub async fn project(&self, id: &str) -> Result<Project> {
        let mut conn = store::read(&self.store).await?;
        store::projects::by_id(&mut conn, id).await
    }

    // ---- tasks ----------------------------------------------------------------------------

    /// Opens a task owned by `owner` (an agent key's id) in the project's initial step.
    pub async fn create_task(
        &self,
        owner: &str,
        body: CreateTask,
        idem: Option<&str>,
    ) -> Result<Task> {
        let idem = IdemKey::of(idem, &body)?;
        let mut tx = self.begin().await?;
        if let Some(original) = claim_key(&mut tx, owner, idem.as_ref(), POST_TASKS).await? {
            return Ok(original);
        }
        require_text("name", &body.name)?;
        let project = store::projects::by_name(&mut tx, &body.project_name)
            .await?
            .ok_or_else(|| InboxError::NotFound(format!("project {:?}", body.project_name)))?;
        let patch = body.metadata_patch.unwrap_or_default();
        let mut metadata = Map::new();
        patch.apply(&mut metadata);
        let task = Task {
            id: new_id(),
            project_id: project.id.clone(),
            name: body.name,
            external_id: body.external_id,
            status: TaskStatus::Running,
            current_step: project.steps.initial_step.clone(),
            metadata,
            attachments: Vec::new(),
        };
        let now = now_ms();
        store::tasks::insert(&mut tx, owner, &task, now).await?;
        let payload = Payload::TaskCreated {
            name: task.name.clone(),
            initial_state: task.current_step.clone(),
            metadata_patch: patch,
        };
        let event = NewEvent::new(EventType::TaskCreated, Actor::Agent, payload);
        insert_event(&mut tx, &task, &project, event, now).await?;
        remember_response(&mut tx, owner, idem.as_ref(), &task).await?;
        tx.commit().await?;
        Ok(task)
    }

    /// `owner`'s tasks, newest first.
    pub async fn tasks(&self, owner: &str, filter: &TaskFilter) -> Result<ItemList<Task>> {
        let mut conn = store::read(&self.store).await?;
        let all = store::tasks::of_owner(&mut conn, owner, filter.project_id.as_deref()).await?;
        // The name filter runs here rather than in SQL: SQLite's LOWER folds ASCII only.
        let needle = filter.name.as_deref().map(str::to_lowercase);
        let mut items = Vec::new();
        for task in all {
            if needle
                .as_deref()
                .is_none_or(|n| task.name.to_lowercase().contains(n))
            {
                items.push(task);
            }
        }
        Ok(ItemList { items })
    }

    /// One of `owner`'s tasks with its pending requests, oldest first.
    pub async fn task(&self, owner: &str, id: &str) -> Result<TaskDetail> {
        let mut conn = store::read(&self.store).await?;
        let task = owned_task(&mut conn, owner, id).await?;
        let open = store::requests::open_of_task(&mut conn, id).await?;
        let mut open_requests = Vec::with_capacity(open.len());
        for request in open {
            // Both request shapes start with the summary; read just that.
            let summary: Summary = from_json(&request.request, "request")?;
            open_requests.push(OpenRequest {
                request_id: request.id,
                event_type: if request.kind == Kind::Approval.as_str() {
                    EventType::ApprovalRequested
                } else {
                    EventType::ElicitationRequested
                },
                summary: summary.summary,
                requested_at: Timestamp::from_unix_millis(request.asked_at),
            });
        }
        Ok(TaskDetail {
            task,
            open_requests,
        })
    }

    /// A page of the task's event log in order, after `cursor` (from the start without
    /// one). `limit` defaults to 50 and is clamped to 1..=[`MAX_EVENTS_PAGE`].
    pub async fn task_events(
        &self,
        owner: &str,
        task_id: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<TaskEvents> {
        let after = cursor.map(decode_cursor).transpose()?;
        let limit = limit
            .unwrap_or(DEFAULT_EVENTS_PAGE)
            .clamp(1, MAX_EVENTS_PAGE);
        let mut conn = store::read(&self.store).await?;
        owned_task(&mut conn, owner, task_id).await?;
        let page = store::events::page(&mut conn, task_id, after.unwrap_or(0), limit).await?;
        let mut items = Vec::with_capacity(page.len());
        let mut last = after;
        for (seq, event) in page {
            last = Some(seq);
            items.push(event);
        }
        Ok(TaskEvents {
            items,
            next_cursor: last.map(encode_cursor),
        })
    }

    // ---- requests -------------------------------------------------------------------------

    /// Opens an approval request on one of `owner`'s tasks; the task waits for it.
    pub async fn create_approval(
        &self,
        owner: &str,
        body: CreateApproval,
        idem: Option<&str>,
    ) -> Result<EventId> {
        let idem = IdemKey::of(idem, &body)?;
        let mut tx = self.begin().await?;
        if let Some(original) = claim_key(&mut tx, owner, idem.as_ref(), POST_APPROVALS).await? {
            return Ok(original);
        }
        require_text("summary", &body.request.summary)?;
        let request_json = to_json(&body.request)?;
        let asked = Asked {
            task_id: &body.task_id,
            project_name: &body.project_name,
            external_trace_id: body.external_trace_id.as_deref(),
            summary: &body.request.summary,
            key_value_context: body.request.key_value_context.as_ref(),
            attachments: body.request.attachments.as_deref(),
            request_json: &request_json,
        };
        let payload = Payload::ApprovalRequested(body.request.clone());
        self.open_asked(tx, owner, idem.as_ref(), Kind::Approval, asked, payload)
            .await
    }

    /// Opens an elicitation request on one of `owner`'s tasks; the task waits for it. The
    /// field definitions must be usable ([`validate_field_defs`]) and every recommendation
    /// must name one of the fields.
    pub async fn create_elicitation(
        &self,
        owner: &str,
        body: CreateElicitation,
        idem: Option<&str>,
    ) -> Result<EventId> {
        let idem = IdemKey::of(idem, &body)?;
        let mut tx = self.begin().await?;
        if let Some(original) = claim_key(&mut tx, owner, idem.as_ref(), POST_ELICITATIONS).await? {
            return Ok(original);
        }
        let request = &body.request;
        require_text("summary", &request.summary)?;
        if request.fields.is_empty() {
            return Err(InboxError::Invalid {
                code: "invalid_fields",
                message: "fields must not be empty: there would be nothing to answer".into(),
            });
        }
        validate_field_defs(&request.fields).map_err(|errors| InboxError::Invalid {
            code: "invalid_fields",
            message: errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        })?;
        for bid in request.recommendation.iter().flatten() {
            if !request.fields.iter().any(|f| f.id() == bid.field_id) {
                return Err(InboxError::Invalid {
                    code: "unknown_field",
                    message: format!(
                        "the recommendation for {:?} names no field of the request",
                        bid.field_id
                    ),
                });
            }
        }
        let request_json = to_json(request)?;
        let asked = Asked {
            task_id: &body.task_id,
            project_name: &body.project_name,
            external_trace_id: body.external_trace_id.as_deref(),
            summary: &request.summary,
            key_value_context: request.key_value_context.as_ref(),
            attachments: request.attachments.as_deref(),
            request_json: &request_json,
        };
        let payload = Payload::ElicitationRequested(request.clone());
        self.open_asked(tx, owner, idem.as_ref(), Kind::Elicitation, asked, payload)
            .await
    }

    /// What both request kinds do once their own checks passed: the policy sees the
    /// summary and `keyValueContext.action`, the request is opened, and the change feed told.
    async fn open_asked(
        &self,
        tx: Tx,
        owner: &str,
        idem: Option<&IdemKey<'_>>,
        kind: Kind,
        asked: Asked<'_>,
        payload: Payload,
    ) -> Result<EventId> {
        let action = policy_hooks::action_of(asked.key_value_context);
        let target = RequestTarget {
            inbox: self,
            owner,
            idem,
            task_id: asked.task_id,
            project_name: asked.project_name,
            external_trace_id: asked.external_trace_id,
            summary: asked.summary,
            action: action.as_deref(),
        };
        let created = target
            .open(tx, kind, asked.attachments, asked.request_json, payload)
            .await?;
        self.announce(&created.event_id, review::ChangeKind::Created);
        Ok(created)
    }

    /// The decision on one of `owner`'s approval requests; `None` while it is pending.
    pub async fn approval_result(
        &self,
        owner: &str,
        request_id: &str,
    ) -> Result<Option<ApprovalResult>> {
        self.result(owner, request_id, Kind::Approval).await
    }

    /// The answers to one of `owner`'s elicitation requests; `None` while it is pending.
    pub async fn elicitation_result(
        &self,
        owner: &str,
        request_id: &str,
    ) -> Result<Option<ElicitationResult>> {
        self.result(owner, request_id, Kind::Elicitation).await
    }

    async fn result<T: DeserializeOwned>(
        &self,
        owner: &str,
        request_id: &str,
        kind: Kind,
    ) -> Result<Option<T>> {
        let mut stored = self.outcome_of(owner, request_id, kind).await?;
        if stored.status == review::RequestStatus::Pending.as_str()
            && stored.expires_at.is_some_and(|at| at <= now_ms())
        {
            // Overdue and the sweeper has not come by: expire it now (a write, only then),
            // so the agent reads the expired result rather than a 204.
            let mut tx = self.begin().await?;
            if self
                .expire_if_overdue(&mut tx, request_id, Some(kind))
                .await?
            {
                tx.commit().await?;
                self.announce(request_id, review::ChangeKind::Decided);
            }
            stored = self.outcome_of(owner, request_id, kind).await?;
        }
        if stored.status == review::RequestStatus::Withdrawn.as_str() {
            // No result will ever come; saying so beats a 204 the agent would poll forever.
            return Err(InboxError::Withdrawn(request_id.to_owned()));
        }
        stored.result.map(|r| from_json(&r, "result")).transpose()
    }

    /// The stored outcome of one of `owner`'s requests of `kind`.
    async fn outcome_of(
        &self,
        owner: &str,
        request_id: &str,
        kind: Kind,
    ) -> Result<store::requests::Outcome> {
        let mut conn = store::read(&self.store).await?;
        store::requests::outcome_of(&mut conn, owner, request_id, kind.as_str())
            .await?
            .ok_or_else(|| InboxError::NotFound(kind.what(request_id)))
    }

    /// Records a human's decision on an approval request. `decided_by` identifies the
    /// human; it becomes `decidedBy` and the authority snapshot's `subject`.
    pub async fn decide_approval(
        &self,
        request_id: &str,
        outcome: Outcome,
        decided_by: &str,
    ) -> Result<ApprovalResult> {
        let mut tx = self.begin_decision(request_id, Kind::Approval).await?;
        let (task_id, request_json) = pending_request(&mut tx, request_id, Kind::Approval).await?;
        let request: ApprovalRequest = from_json(&request_json, "request")?;
        let decided_at = Timestamp::now();
        let authority = AuthoritySnapshot {
            subject: Some(decided_by.to_owned()),
            tags: None,
        };
        let result = ApprovalResult {
            request_id: request_id.to_owned(),
            task_id,
            outcome: outcome.clone(),
            decided_at: decided_at.clone(),
            decided_by: Some(decided_by.to_owned()),
            authority_snapshot: Some(authority.clone()),
            // What the human saw when deciding.
            recommendation_snapshot: request.recommendation.clone(),
        };
        let payload = Payload::ApprovalDecided {
            outcome,
            authority: Some(authority),
            recommendation_snapshot: request.recommendation,
        };
        let event = NewEvent::new(EventType::ApprovalDecided, Actor::Human, payload);
        settle(
            &mut tx,
            request_id,
            &result,
            &result.task_id,
            decided_by,
            &decided_at,
            event,
        )
        .await?;
        tx.commit().await?;
        self.announce(request_id, review::ChangeKind::Decided);
        Ok(result)
    }

    /// Records a human's answers to an elicitation request, after checking them against
    /// its fields. Invalid answers store nothing and list every problem.
    pub async fn answer_elicitation(
        &self,
        request_id: &str,
        answers: &Map<String, Value>,
        answered_by: &str,
    ) -> Result<ElicitationResult> {
        let mut tx = self.begin_decision(request_id, Kind::Elicitation).await?;
        let (task_id, request_json) =
            pending_request(&mut tx, request_id, Kind::Elicitation).await?;
        let request: ElicitationRequest = from_json(&request_json, "request")?;
        let normalized =
            validate_answers(&request.fields, answers).map_err(InboxError::InvalidAnswers)?;
        let answered_at = Timestamp::now();
        let result = ElicitationResult {
            request_id: request_id.to_owned(),
            task_id,
            answered_at: answered_at.clone(),
            answered_by: Some(answered_by.to_owned()),
            fields: Some(normalized.clone()),
        };
        let payload = Payload::ElicitationProvided {
            answered_by: Some(answered_by.to_owned()),
            answers: Some(normalized),
        };
        let event = NewEvent::new(EventType::ElicitationProvided, Actor::Human, payload);
        settle(
            &mut tx,
            request_id,
            &result,
            &result.task_id,
            answered_by,
            &answered_at,
            event,
        )
        .await?;
        tx.commit().await?;
        self.announce(request_id, review::ChangeKind::Decided);
        Ok(result)
    }

    // ---- the agent's log ------------------------------------------------------------------

    /// Logs what the agent did; may move the task to another step, patch its metadata and
    /// attach files.
    pub async fn record_action(
        &self,
        owner: &str,
        body: RecordAction,
        idem: Option<&str>,
    ) -> Result<EventId> {
        let idem = IdemKey::of(idem, &body)?;
        require_text("description", &body.description)?;
        let patch = body.metadata_patch.clone().unwrap_or_default();
        let payload = Payload::Action {
            description: body.description.clone(),
            detail: body.detail.clone(),
            metadata_patch: patch,
            add_attachments: body.add_attachments.clone(),
        };
        let new = AgentEvent {
            transitions_to: body.transitions_to.as_deref(),
            metadata_patch: body.metadata_patch.as_ref(),
            add_attachments: body.add_attachments.as_deref(),
            ..AgentEvent::new(
                POST_ACTIONS,
                &body.project_name,
                &body.task_id,
                body.external_trace_id.as_deref(),
                EventType::Action,
                payload,
            )
        };
        self.agent_event(owner, idem.as_ref(), new).await
    }

    /// Logs something that went wrong; may move the task to another step.
    pub async fn report_exception(
        &self,
        owner: &str,
        body: ReportException,
        idem: Option<&str>,
    ) -> Result<EventId> {
        let idem = IdemKey::of(idem, &body)?;
        require_text("message", &body.message)?;
        let payload = Payload::ExceptionRaised {
            message: body.message.clone(),
            detail: body.detail.clone(),
        };
        let new = AgentEvent {
            transitions_to: body.transitions_to.as_deref(),
            ..AgentEvent::new(
                POST_EXCEPTIONS,
                &body.project_name,
                &body.task_id,
                body.external_trace_id.as_deref(),
                EventType::Exception,
                payload,
            )
        };
        self.agent_event(owner, idem.as_ref(), new).await
    }

    /// Logs a note on the task.
    pub async fn add_note(
        &self,
        owner: &str,
        body: AddNote,
        idem: Option<&str>,
    ) -> Result<EventId> {
        let idem = IdemKey::of(idem, &body)?;
        require_text("message", &body.message)?;
        let payload = Payload::Note {
            message: body.message.clone(),
        };
        let new = AgentEvent::new(
            POST_NOTES,
            &body.project_name,
            &body.task_id,
            body.external_trace_id.as_deref(),
            EventType::Note,
            payload,
        );
        self.agent_event(owner, idem.as_ref(), new).await
    }

    async fn agent_event(
        &self,
        owner: &str,
        idem: Option<&IdemKey<'_>>,
        mut new: AgentEvent<'_>,
    ) -> Result<EventId> {
        let mut tx = self.begin().await?;
        if let Some(original) = claim_key(&mut tx, owner, idem, new.method_path).await? {
            return Ok(original);
        }
        let (mut task, project) = agent_task(&mut tx, owner, new.task_id, new.project_name).await?;
        let added: Vec<&str> = (new.add_attachments.into_iter().flatten())
            .map(|a| a.upload_id.as_str())
            .collect();
        uploads::check_owned_uploads(&mut tx, owner, &added).await?;
        if let Some(to) = new.transitions_to {
            check_transition(&project, &task.current_step, to)?;
            let from = std::mem::replace(&mut task.current_step, to.to_owned());
            new.event.transition = Some((from, to.to_owned()));
        }
        if let Some(patch) = new.metadata_patch {
            patch.apply(&mut task.metadata);
        }
        for added in new.add_attachments.into_iter().flatten() {
            match task
                .attachments
                .iter_mut()
                .find(|a| a.upload_id == added.upload_id)
            {
                Some(existing) => existing.label.clone_from(&added.label),
                None => task.attachments.push(added.clone()),
            }
        }
        let now = now_ms();
        store::tasks::save(&mut tx, &task, now).await?;
        let event_id = insert_event(&mut tx, &task, &project, new.event, now).await?;
        let response = EventId { event_id };
        remember_response(&mut tx, owner, idem, &response).await?;
        tx.commit().await?;
        Ok(response)
    }
}

/// The one property [`Inbox::task`] reads from a stored request.
#[derive(serde::Deserialize)]
struct Summary {
    summary: String,
}

// ---- requests -------------------------------------------------------------------------------

/// The parts of a request both kinds share, borrowed from the agent's body.
struct Asked<'a> {
    task_id: &'a str,
    project_name: &'a str,
    external_trace_id: Option<&'a str>,
    summary: &'a str,
    key_value_context: Option<&'a std::collections::BTreeMap<String, String>>,
    attachments: Option<&'a [String]>,
    request_json: &'a str,
}

/// Where a new request goes, and the idempotency key it was created under.
struct RequestTarget<'a> {
    /// Its policy and notifications apply.
    inbox: &'a Inbox,
    owner: &'a str,
    idem: Option<&'a IdemKey<'a>>,
    task_id: &'a str,
    project_name: &'a str,
    external_trace_id: Option<&'a str>,
    /// What the policy looks at: the summary and `keyValueContext.action`.
    summary: &'a str,
    action: Option<&'a str>,
}

impl RequestTarget<'_> {
    /// The part both request kinds share once their own checks passed: the task must be the
    /// agent's and hold the attachments; then the request is opened, the response remembered
    /// under the idempotency key, and everything committed together.
    async fn open(
        &self,
        mut tx: Tx,
        kind: Kind,
        attachments: Option<&[String]>,
        request_json: &str,
        payload: Payload,
    ) -> Result<EventId> {
        let (task, project) =
            agent_task(&mut tx, self.owner, self.task_id, self.project_name).await?;
        let named: Vec<&str> = attachments
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        uploads::check_owned_uploads(&mut tx, self.owner, &named).await?;
        check_attachments(&task, attachments)?;
        policy_hooks::check_rate_limits(&mut tx, self, now_ms()).await?;
        let event_type = match kind {
            Kind::Approval => EventType::ApprovalRequested,
            Kind::Elicitation => EventType::ElicitationRequested,
        };
        let mut event = NewEvent::new(event_type, Actor::Agent, payload);
        event.external_trace_id = self.external_trace_id;
        let response = open_request(&mut tx, task, &project, kind, request_json, event).await?;
        let applied =
            policy_hooks::after_open(&mut tx, self, kind, &project, &response.event_id).await?;
        remember_response(&mut tx, self.owner, self.idem, &response).await?;
        tx.commit().await?;
        policy_hooks::after_commit(self.inbox, &response.event_id, &applied);
        Ok(response)
    }
}

/// Logs the `*_REQUESTED` event, stores the pending request under the event's id and makes
/// the task wait.
async fn open_request(
    conn: &mut Conn,
    mut task: Task,
    project: &Project,
    kind: Kind,
    request_json: &str,
    event: NewEvent<'_>,
) -> Result<EventId> {
    let now = now_ms();
    task.status = TaskStatus::Waiting;
    store::tasks::save(&mut *conn, &task, now).await?;
    let event_id = insert_event(&mut *conn, &task, project, event, now).await?;
    store::requests::insert(
        conn,
        &event_id,
        kind.as_str(),
        &task.id,
        &task.project_id,
        request_json,
        now,
    )
    .await?;
    Ok(EventId { event_id })
}

/// `(task id, request JSON)` of a pending request of `kind`.
async fn pending_request(
    conn: &mut Conn,
    request_id: &str,
    kind: Kind,
) -> Result<(String, String)> {
    let stored = store::requests::get(conn, request_id, kind.as_str())
        .await?
        .ok_or_else(|| InboxError::NotFound(kind.what(request_id)))?;
    if stored.status != review::RequestStatus::Pending.as_str() {
        return Err(InboxError::AlreadyDecided);
    }
    Ok((stored.task_id, stored.request))
}

/// Stores a request's result — only if it is still pending — logs the decision and lets
/// the task run again when nothing else of it is pending.
async fn settle<T: Serialize>(
    conn: &mut Conn,
    request_id: &str,
    result: &T,
    task_id: &str,
    decided_by: &str,
    decided_at: &Timestamp,
    event: NewEvent<'_>,
) -> Result<()> {
    settle_as(
        conn,
        review::RequestStatus::Decided,
        request_id,
        result,
        task_id,
        decided_by,
        decided_at,
        event,
    )
    .await
}

/// [`settle`] with the status the request ends in (`decided`, `expired` or `withdrawn`).
#[allow(clippy::too_many_arguments)] // one call per way of settling; a struct adds nothing
async fn settle_as<T: Serialize>(
    conn: &mut Conn,
    status: review::RequestStatus,
    request_id: &str,
    result: &T,
    task_id: &str,
    decided_by: &str,
    decided_at: &Timestamp,
    mut event: NewEvent<'_>,
) -> Result<()> {
    // The guard that makes a decision happen once, whatever the isolation level: of two
    // racing decisions, only one finds the row still pending.
    let settled = store::requests::settle(
        &mut *conn,
        request_id,
        status.as_str(),
        &to_json(result)?,
        decided_by,
        decided_at.unix_millis(),
    )
    .await?;
    if !settled {
        return Err(InboxError::AlreadyDecided);
    }
    let mut task = store::tasks::by_id(&mut *conn, task_id).await?.task;
    let project = store::projects::by_id(&mut *conn, &task.project_id).await?;
    let still_pending = store::requests::pending_of_task(&mut *conn, task_id).await?;
    let now = now_ms();
    if still_pending == 0 && task.status == TaskStatus::Waiting {
        task.status = TaskStatus::Running;
        store::tasks::save(&mut *conn, &task, now).await?;
    }
    event.in_response_to = Some(request_id);
    insert_event(&mut *conn, &task, &project, event, now).await?;
    Ok(())
}

// ---- tasks and projects ---------------------------------------------------------------------

/// One of `owner`'s tasks; another key's task is reported missing, like a missing one.
async fn owned_task(conn: &mut Conn, owner: &str, id: &str) -> Result<Task> {
    let owned = store::tasks::by_id(conn, id).await?;
    if owned.owner != owner {
        return Err(InboxError::NotFound(format!("task {id}")));
    }
    Ok(owned.task)
}

/// One of `owner`'s tasks and its project, which must be the one the agent named.
async fn agent_task(
    conn: &mut Conn,
    owner: &str,
    task_id: &str,
    project_name: &str,
) -> Result<(Task, Project)> {
    let task = owned_task(&mut *conn, owner, task_id).await?;
    let project = store::projects::by_id(&mut *conn, &task.project_id).await?;
    if project.name != project_name {
        return Err(InboxError::Invalid {
            code: "project_mismatch",
            message: format!("task {task_id} is not in project {project_name:?}"),
        });
    }
    Ok((task, project))
}

/// A request may show only files already attached to its task.
fn check_attachments(task: &Task, upload_ids: Option<&[String]>) -> Result<()> {
    for id in upload_ids.into_iter().flatten() {
        if !task.attachments.iter().any(|a| &a.upload_id == id) {
            return Err(InboxError::Invalid {
                code: "unknown_attachment",
                message: format!("upload {id:?} is not attached to task {}", task.id),
            });
        }
    }
    Ok(())
}

fn check_steps(steps: &Steps) -> Result<()> {
    let invalid = |message: String| InboxError::Invalid {
        code: "invalid_steps",
        message,
    };
    let mut names = std::collections::HashSet::new();
    for step in &steps.steps {
        if step.name.trim().is_empty() {
            return Err(invalid("step names must not be empty".into()));
        }
        if !names.insert(step.name.as_str()) {
            return Err(invalid(format!("step {:?} is listed twice", step.name)));
        }
    }
    if !names.contains(steps.initial_step.as_str()) {
        return Err(invalid(format!(
            "the initial step {:?} is not one of the steps",
            steps.initial_step
        )));
    }
    for step in &steps.steps {
        for exit in step.exits.iter().flatten() {
            if !names.contains(exit.as_str()) {
                return Err(invalid(format!(
                    "step {:?} exits to {exit:?}, which is not one of the steps",
                    step.name
                )));
            }
        }
    }
    Ok(())
}

/// `to` must be a step of the project and, when the current step lists its exits, one of
/// them.
fn check_transition(project: &Project, from: &str, to: &str) -> Result<()> {
    let steps = &project.steps.steps;
    if !steps.iter().any(|s| s.name == to) {
        return Err(InboxError::InvalidTransition(format!(
            "{to:?} is not a step of project {:?}",
            project.name
        )));
    }
    if let Some(exits) = steps
        .iter()
        .find(|s| s.name == from)
        .and_then(|s| s.exits.as_ref())
        && !exits.iter().any(|e| e == to)
    {
        return Err(InboxError::InvalidTransition(format!(
            "step {from:?} cannot exit to {to:?} (its exits: {})",
            exits.join(", ")
        )));
    }
    Ok(())
}

/// Who owns the step a task is in; a step the project no longer lists falls back to the
/// agent, who drives tasks by default.
fn step_owner(project: &Project, step: &str) -> Actor {
    project
        .steps
        .steps
        .iter()
        .find(|s| s.name == step)
        .map_or(Actor::Agent, |s| s.owner)
}

// ---- events ---------------------------------------------------------------------------------

/// Appends an event to the task's log; `task` is the task as the event leaves it.
async fn insert_event(
    conn: &mut Conn,
    task: &Task,
    project: &Project,
    event: NewEvent<'_>,
    now: i64,
) -> Result<String> {
    let owner = step_owner(project, &task.current_step);
    store::events::insert(conn, task, owner, event, now).await
}

// Cursors are opaque to clients; "e" + the hex seq keeps them short and lets the format
// change later behind another prefix.
fn encode_cursor(seq: i64) -> String {
    format!("e{seq:x}")
}

fn decode_cursor(cursor: &str) -> Result<i64> {
    cursor
        .strip_prefix('e')
        .filter(|hex| !hex.is_empty() && hex.len() <= 16)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .and_then(|seq| i64::try_from(seq).ok())
        .ok_or_else(|| InboxError::Invalid {
            code: "invalid_cursor",
            message: format!("{cursor:?} is not a cursor this API returned"),
        })
}

fn require_text(name: &str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(InboxError::Invalid {
            code: "invalid_request",
            message: format!("{name} must not be empty"),
        });
    }
    Ok(())
}

pub mod decisions;
mod outbox;
mod policy_hooks;
pub mod review;
mod uploads;
mod withdraw;

pub use withdraw::Withdrawal;

#[cfg(test)]
mod tests;
