//! The guide to asking a human, offered to the model as a skill: the `request_*` tools'
//! descriptions point to it, `inbox_guide` returns it in full, and
//! [`crate::tools::register`] gives the registry [`SYSTEM_PROMPT_LINE`], which the agent adds
//! to the system prompt of every turn that enables the `inbox` toolset.
//!
//! The one rule that matters most for durable waits is the last: after asking, the model
//! must end its turn instead of polling — the decision arrives later as a new message in the
//! same conversation, possibly hours later and after a restart.

/// The full guide, as `inbox_guide` returns it.
pub const GUIDE: &str = "\
# Asking a human through the inbox

Your questions go to a human reviewer's inbox. The human may answer in minutes or in hours;
you do not wait for them.

## When to ask
- Before an irreversible or costly action: deleting or overwriting data, deploying, sending
  messages or emails to people, paying, changing production systems or access rights.
- When you lack information only a human has: a preference, a credential you must not guess,
  a business decision, a choice between options with real trade-offs.
- Not for things you can find out yourself (read the files, run a harmless command), and not
  to report progress: use `record_action` or `add_note` for that.

## How to ask
- `request_approval` for a yes/no decision on one concrete action. `request_elicitation`
  when you need values filled in: give `fields` (a form: Text, TextArea, Number, Slider,
  Switch, Select, Multiselect, DateField, DateTime, Time).
- `summary`: one line saying exactly what you want to do or need, e.g.
  \"Delete the 3 stale branches release/1.0, release/1.1, tmp-fix\". The reviewer decides from
  it.
- `keyValueContext`: the facts the reviewer needs, as short strings (what, where, why, the
  impact, how to undo it). Put `action` there as a stable machine name of the action (such
  as `deploy_prod`) so that inbox policies can recognize it.
- `recommendation`: what you suggest and why (`outcome.type` APPROVE or REJECT, a
  `rationale`, a `confidence` from 0 to 1); for an elicitation, pre-filled values per field.
- `attachments`: paths of files in the workspace (relative, inside it) that help decide, such
  as a diff or a log.
- Ask once per decision. Do not ask again for the same thing while a request is pending.

## After asking: end your turn
The tool answers at once with `{\"requestId\": …, \"status\": \"pending\"}`. Then **end your
turn**: tell the user briefly what you asked and that you continue once it is decided. You
will be resumed with the decision as a new message in this conversation — what was asked,
what was decided, by whom, and the full result. **Do not poll**: do not call `get_decision`
in a loop, do not sleep or wait. `get_decision` is for checking a request once, e.g. when the
user asks about it.

## When the decision comes
- APPROVE: do exactly what was approved, nothing more. EDIT_AND_APPROVE: do it with the
  reviewer's changes (see the note).
- REJECT: do not do it, and do not ask again for the same thing unless something changed;
  tell the user, and continue with what remains possible.
- REQUEST_MORE_INFO or ESCALATE: read the note, then gather what is missing and ask anew.
- An elicitation's answers are in `fields` (field id -> value).

## Keeping the reviewer informed
`record_action` logs what you did (it may move the task to another step with
`transitionsTo` and patch its metadata with `metadataPatch`); `report_exception` logs what went
wrong; `add_note` adds a remark. They never wait for anyone.
";

/// A short line for the system prompt when the `inbox` toolset is on.
pub const SYSTEM_PROMPT_LINE: &str = "You can ask a human reviewer through the inbox tools \
(request_approval, request_elicitation). Read the guide with `inbox_guide` before your first \
request. After asking, end your turn: you will be resumed with the decision in this \
conversation; never poll for it.";
