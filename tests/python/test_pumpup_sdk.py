"""The Pump Up Python SDK (`pumpup-sdk` 0.0.10 from PyPI) against a running tern gateway.

The SDK plays the agent: it creates tasks, approval and elicitation requests, reads their
results, logs events and uploads files. The human is `tern inbox`, run as a child process
with the gateway's TERN_HOME (so it finds the gateway and its local admin token in
inbox-admin.json). Nothing is mocked: the SDK's own HTTP client talks to the gateway.

Environment: TERN_GATEWAY_URL, TERN_KEY (an agent key), TERN_BIN (the `tern` binary),
TERN_HOME (the gateway's home). Prints "pumpup-sdk: N passed, N failed".
"""

import concurrent.futures
import datetime as dt
import json
import os
import subprocess
import sys
import traceback
import urllib.error
import urllib.request
import uuid

from pumpup import (
    ApprovalRecommendation,
    Attachment,
    FieldBid,
    Field_DateField,
    Field_DateTime,
    Field_Multiselect,
    Field_Number,
    Field_Select,
    Field_Slider,
    Field_Switch,
    Field_Text,
    Field_TextArea,
    Field_Time,
    MetadataPatchDto,
    Outcome,
    PumpUp,
)
from pumpup.errors import BadRequestError, NotFoundError

BASE = os.environ["TERN_GATEWAY_URL"].rstrip("/")
KEY = os.environ["TERN_KEY"]
TERN = os.environ["TERN_BIN"]
HOME = os.environ["TERN_HOME"]

# max_retries=0: a retried request would hide what the gateway answered the first time.
client = PumpUp(base_url=BASE + "/", api_key=KEY, max_retries=0)


def key():
    return f"sdk-{uuid.uuid4()}"


def tern_inbox(*args):
    """`tern inbox ARGS…` as the local admin; returns the completed process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_INBOX_")}
    env["TERN_HOME"] = HOME
    return subprocess.run(
        [TERN, "inbox", *args], env=env, capture_output=True, text=True, timeout=60
    )


def admin_token():
    with open(os.path.join(HOME, "inbox-admin.json")) as f:
        return json.load(f)["token"]


def raw(method, path, token, body=None, headers=None):
    """One HTTP request outside the SDK: `(status, parsed body or None)`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req) as r:
            text = r.read()
            return r.status, (json.loads(text) if text.strip() else None)
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, (json.loads(text) if text.strip() else None)


def new_task(name, **kw):
    return client.tasks.create(idempotency_key=key(), name=name, project_name="default", **kw)


# ---- the tests -------------------------------------------------------------------------------


def test_projects_default_exists():
    projects = client.projects.list()
    default = [p for p in projects.items if p.project_name == "default"]
    assert len(default) == 1, projects
    again = client.projects.get(default[0].id)
    assert again.steps.initial_step == "default", again


def test_task_create_get_list_metadata():
    name = f"sdk task {uuid.uuid4()}"
    task = new_task(
        name,
        external_id="run-42",
        metadata_patch=MetadataPatchDto(set_={"ticket": "T-1", "n": 3}),
    )
    assert task.status == "RUNNING" and task.current_step == "default", task
    assert task.metadata == {"ticket": "T-1", "n": 3}, task.metadata
    detail = client.tasks.get(task.id)
    assert detail.task.id == task.id and detail.open_requests == [], detail
    listed = client.tasks.list(name=name.upper())
    assert [t.id for t in listed.items] == [task.id], listed


def test_approval_pending_then_approved_from_the_cli():
    task = new_task("deploy")
    created = client.approvals.create(
        idempotency_key=key(),
        project_name="default",
        task_id=task.id,
        summary="Deploy v2 to prod?",
        key_value_context={"env": "prod", "version": "v2"},
        recommendation=ApprovalRecommendation(
            outcome=Outcome(type="APPROVE"), confidence=0.9, rationale="all checks green"
        ),
    )
    rid = created.event_id
    # Pending: the raw response is 204 with no body, which the SDK returns as None.
    pending = client.approvals.with_raw_response.get_result(rid)
    assert pending.status_code == 204 and pending.data is None, pending.status_code
    assert client.approvals.get_result(rid) is None
    detail = client.tasks.get(task.id)
    assert detail.task.status == "WAITING", detail.task
    assert [r.request_id for r in detail.open_requests] == [rid], detail.open_requests

    shown = tern_inbox("show", rid, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["summary"] == "Deploy v2 to prod?" and view["keyValueContext"]["env"] == "prod"

    done = tern_inbox("approve", rid, "--note", "ship it", "--reason-code", "green")
    assert done.returncode == 0, done.stderr

    decided = client.approvals.with_raw_response.get_result(rid)
    assert decided.status_code == 200, decided.status_code
    result = decided.data
    assert result.request_id == rid and result.task_id == task.id, result
    assert result.outcome.type == "APPROVE", result.outcome
    assert result.outcome.note == "ship it" and result.outcome.reason_code == "green"
    assert result.decided_by == "admin", result.decided_by
    assert result.decided_at.tzinfo is not None, result.decided_at
    assert client.tasks.get(task.id).task.status == "RUNNING"


def test_approval_rejected_from_the_cli():
    task = new_task("drop table")
    rid = client.approvals.create(
        idempotency_key=key(), project_name="default", task_id=task.id, summary="Drop it?"
    ).event_id
    done = tern_inbox("reject", rid, "--note", "not today", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"]["type"] == "REJECT"
    result = client.approvals.get_result(rid)
    assert result.outcome.type == "REJECT" and result.outcome.note == "not today", result


def every_field_kind():
    return [
        Field_Text(id="email", label="E-mail", required=True, format="EMAIL", max_length=80),
        Field_TextArea(id="notes", label="Notes", required=False, max_length=500),
        Field_Number(id="count", label="How many", required=True, integer_only=True, min=1, max=10),
        Field_Slider(id="level", label="Level", required=True, min=0, max=1, step=0.25),
        Field_Switch(id="urgent", label="Urgent?", required=True),
        Field_Select(id="size", label="Size", required=True, options=["S", "M", "L"]),
        Field_Multiselect(id="tags", label="Tags", required=False, options=["a", "b", "c"]),
        Field_DateField(id="day", label="Day", required=True, min=dt.date(2024, 1, 1)),
        Field_DateTime(id="at", label="When exactly", required=False),
        Field_Time(id="time", label="Time", required=False, min="09:00", max="17:00"),
    ]


def test_elicitation_with_every_field_kind_answered_from_the_cli():
    task = new_task("form")
    rid = client.elicitations.create(
        idempotency_key=key(),
        project_name="default",
        task_id=task.id,
        summary="A few details",
        fields=every_field_kind(),
        recommendation=[FieldBid(field_id="size", value="M", confidence=0.7)],
    ).event_id
    pending = client.elicitations.with_raw_response.get_result(rid)
    assert pending.status_code == 204 and pending.data is None

    shown = tern_inbox("show", rid, "--json")
    assert shown.returncode == 0, shown.stderr
    kinds = [f["type"] for f in json.loads(shown.stdout)["fields"]]
    assert sorted(kinds) == sorted(
        ["Text", "TextArea", "Number", "Slider", "Switch", "Select", "Multiselect",
         "DateField", "DateTime", "Time"]
    ), kinds

    # Invalid answers: refused with an error per field (exit 6), nothing stored.
    bad = tern_inbox(
        "answer", rid, "--field", "email=nope", "--field", "count=11", "--field", "level=0.3",
        "--field", "urgent=no", "--field", "size=XL", "--field", "day=2023-12-31",
        "--field", "time=18:00",
    )
    assert bad.returncode == 6, (bad.returncode, bad.stderr)
    for field in ("email", "count", "level", "size", "day", "time"):
        assert f"{field}:" in bad.stderr, (field, bad.stderr)
    assert client.elicitations.get_result(rid) is None

    good = tern_inbox(
        "answer", rid,
        "--field", "email=ada@example.com",
        "--field", "notes=first line",
        "--field", "count=7",
        "--field", "level=0.75",
        "--field", "urgent=yes",
        "--field", "size=M",
        "--field", "tags=a,c",
        "--field", "day=2024-02-29",
        "--field", "at=2024-03-01T10:00:00+01:00",
        "--field", "time=09:30",
    )
    assert good.returncode == 0, good.stderr
    decided = client.elicitations.with_raw_response.get_result(rid)
    assert decided.status_code == 200
    result = decided.data
    assert result.request_id == rid and result.answered_by == "admin", result
    f = result.fields
    assert f["email"] == "ada@example.com" and f["count"] == 7 and f["level"] == 0.75, f
    assert f["urgent"] is True and f["size"] == "M" and f["tags"] == ["a", "c"], f
    assert f["day"] == "2024-02-29" and f["time"].startswith("09:30"), f


def test_events_listed_with_a_cursor():
    task = new_task("events")
    client.events.note(idempotency_key=key(), project_name="default", task_id=task.id, message="one")
    client.events.agent_action(
        idempotency_key=key(), project_name="default", task_id=task.id, description="two",
        metadata_patch=MetadataPatchDto(set_={"step": 2}),
    )
    client.events.exception(
        idempotency_key=key(), project_name="default", task_id=task.id, message="three"
    )
    first = client.tasks.events(task.id, limit=2)
    assert [e.event_type for e in first.items] == ["TASK_CREATED", "NOTE"], first.items
    assert first.next_cursor, first
    rest = client.tasks.events(task.id, cursor=first.next_cursor, limit=10)
    assert [e.event_type for e in rest.items] == ["ACTION", "EXCEPTION"], rest.items
    assert rest.items[0].payload.description == "two"
    # At the end: nothing new, and the cursor stays where it was (a tail to follow).
    tail = client.tasks.events(task.id, cursor=rest.next_cursor)
    assert tail.items == [] and tail.next_cursor == rest.next_cursor, tail
    client.events.note(idempotency_key=key(), project_name="default", task_id=task.id, message="four")
    more = client.tasks.events(task.id, cursor=tail.next_cursor)
    assert [e.payload.message for e in more.items] == ["four"], more.items
    assert client.tasks.get(task.id).task.metadata == {"step": 2}


def test_retry_with_the_same_idempotency_key_creates_nothing():
    k = key()
    name = f"idem {uuid.uuid4()}"
    t1 = client.tasks.create(idempotency_key=k, name=name, project_name="default")
    t2 = client.tasks.create(idempotency_key=k, name=name, project_name="default")
    assert t1.id == t2.id, (t1, t2)
    assert len(client.tasks.list(name=name).items) == 1

    ak = key()
    args = dict(project_name="default", task_id=t1.id, summary="Once only?")
    a1 = client.approvals.create(idempotency_key=ak, **args).event_id
    a2 = client.approvals.create(idempotency_key=ak, **args).event_id
    assert a1 == a2
    opened = [r.request_id for r in client.tasks.get(t1.id).open_requests]
    assert opened == [a1], opened
    assert tern_inbox("approve", a1).returncode == 0
    # Also after the decision: the original response, no new request.
    a3 = client.approvals.create(idempotency_key=ak, **args).event_id
    assert a3 == a1
    assert client.tasks.get(t1.id).open_requests == []
    events = client.tasks.events(t1.id, limit=100).items
    assert [e.event_type for e in events].count("APPROVAL_REQUESTED") == 1, events


def test_concurrent_duplicates_get_one_request():
    task = new_task("concurrent")
    k = key()

    def create(_):
        return client.approvals.create(
            idempotency_key=k, project_name="default", task_id=task.id, summary="Race?"
        ).event_id

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        ids = set(pool.map(create, range(8)))
    assert len(ids) == 1, ids
    opened = [r.request_id for r in client.tasks.get(task.id).open_requests]
    assert opened == list(ids), opened


def test_second_decision_is_409_and_changes_nothing():
    task = new_task("decide once")
    rid = client.approvals.create(
        idempotency_key=key(), project_name="default", task_id=task.id, summary="Once?"
    ).event_id
    assert tern_inbox("approve", rid, "--note", "first").returncode == 0
    second = tern_inbox("reject", rid, "--note", "second")
    assert second.returncode == 4, (second.returncode, second.stderr)
    assert "already decided by admin" in second.stderr, second.stderr
    # The reviewer API itself answers 409.
    status, body = raw(
        "POST", f"/inbox/api/requests/{rid}/decide", admin_token(),
        {"outcome": {"type": "REJECT"}},
    )
    assert status == 409 and "error" in body, (status, body)
    result = client.approvals.get_result(rid)
    assert result.outcome.type == "APPROVE" and result.outcome.note == "first", result


def test_an_agent_key_cannot_decide():
    task = new_task("agent decides?")
    rid = client.approvals.create(
        idempotency_key=key(), project_name="default", task_id=task.id, summary="Self-approve?"
    ).event_id
    status, body = raw(
        "POST", f"/inbox/api/requests/{rid}/decide", KEY, {"outcome": {"type": "APPROVE"}}
    )
    assert status == 403, (status, body)
    assert client.approvals.get_result(rid) is None


def test_errors_in_the_sdks_shapes():
    try:
        client.tasks.get("0190a000-0000-7000-8000-000000000000")
    except NotFoundError as e:
        assert e.status_code == 404
    else:
        raise AssertionError("expected 404")
    task = new_task("errors")
    try:
        client.elicitations.create(
            idempotency_key=key(), project_name="default", task_id=task.id, summary="bad",
            fields=[Field_Select(id="x", label="X", required=True, options=[])],
        )
    except BadRequestError as e:
        assert e.status_code == 400 and e.body.code, e.body
    else:
        raise AssertionError("expected 400")
    try:
        client.events.note(
            idempotency_key=key(), project_name="no-such-project", task_id=task.id, message="x"
        )
    except (NotFoundError, BadRequestError) as e:
        assert e.status_code in (400, 404)
    else:
        raise AssertionError("expected an error for an unknown project")


def test_upload_and_attach():
    content = b"tern upload check\n"
    ref = client.uploads.upload(file=("report.txt", content, "text/plain"))
    assert ref.id and ref.status, ref
    task = new_task("with a file")
    client.events.agent_action(
        idempotency_key=key(), project_name="default", task_id=task.id,
        description="attached the report",
        add_attachments=[Attachment(upload_id=ref.id, label="the report")],
    )
    attached = client.tasks.get(task.id).task.attachments
    assert [(a.upload_id, a.label) for a in attached] == [(ref.id, "the report")], attached
    rid = client.approvals.create(
        idempotency_key=key(), project_name="default", task_id=task.id,
        summary="Send the report?", attachments=[ref.id],
    ).event_id
    resolved = client.uploads.get(ref.id)
    assert resolved.id == ref.id and resolved.size == len(content), resolved
    assert resolved.content_type.startswith("text/plain"), resolved
    # The owning key can download it.
    url = resolved.url if resolved.url.startswith("http") else BASE + resolved.url
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req) as r:
        assert r.read() == content
    shown = tern_inbox("show", rid, "--json")
    assert shown.returncode == 0, shown.stderr
    assert ref.id in json.dumps(json.loads(shown.stdout)["attachments"]), shown.stdout
    # The reviewer downloads it with the CLI.
    got = tern_inbox("download", ref.id)
    assert got.returncode == 0 and got.stdout == content.decode(), (got.returncode, got.stderr)
    missing = tern_inbox("download", "0190a000-0000-7000-8000-000000000000")
    assert missing.returncode == 5, (missing.returncode, missing.stderr)


def main():
    tests = [
        test_projects_default_exists,
        test_task_create_get_list_metadata,
        test_approval_pending_then_approved_from_the_cli,
        test_approval_rejected_from_the_cli,
        test_elicitation_with_every_field_kind_answered_from_the_cli,
        test_events_listed_with_a_cursor,
        test_retry_with_the_same_idempotency_key_creates_nothing,
        test_concurrent_duplicates_get_one_request,
        test_second_decision_is_409_and_changes_nothing,
        test_an_agent_key_cannot_decide,
        test_errors_in_the_sdks_shapes,
        test_upload_and_attach,
    ]
    passed = failed = 0
    for t in tests:
        try:
            t()
            passed += 1
            print(f"ok     {t.__name__}")
        except Exception:
            failed += 1
            print(f"FAILED {t.__name__}")
            traceback.print_exc()
    print(f"pumpup-sdk: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
