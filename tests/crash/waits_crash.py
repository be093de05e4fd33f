"""Durable waits under kill -9: every decision is appended to its session exactly once and
answered.

200 sessions each ask for an approval (the fake model calls `request_approval`) while a
killer kill -9s the gateway at random moments and starts it again on the same $TERN_HOME; a
chat cut short by a kill is retried (a new user message) until its session has its wait.
Then a decider approves the requests one by one over the reviewer API while the killer goes
on. When every request is decided and the gateway has caught up, each session must have had
exactly one wait, hold exactly one decision message (a user message that names its request
id), answered by the agent afterwards — the `[interrupted]` marker is not an answer — in a
well-formed transcript (tool results right after the assistant message that called them),
and no open wait.

Run by tests/crash/run.sh, which builds the binaries and starts the fake model. Prints
`waits-crash: 1 passed, 0 failed (…)` (one test; the sessions are its checks).
"""
import atexit
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

BIN = os.environ["TERN_BIN_DIR"]
HOME = os.environ["TERN_HOME"]
PORT = int(os.environ["TERN_PORT"])
KEY = os.environ["TERN_SERVER_KEY"]
URL = f"http://127.0.0.1:{PORT}"
SESSIONS = int(os.environ.get("WAITS_CRASH_SESSIONS", "200"))
SEED = int(os.environ.get("WAITS_CRASH_SEED", str(int(time.time()))))
LOG = open(os.path.join(HOME, "..", "gateway.log"), "ab")
# What a request to a gateway being killed may raise.
DOWN = (OSError, urllib.error.URLError, http.client.HTTPException)
# How long one step (a session's chat, a decision) may take, kills included, before the test
# fails instead of waiting on.
STEP_SECS = 120
# The agent's marker for a turn cut short: never an answer.
INTERRUPTED = "[interrupted]"
# How a decision message begins.
DECISION_TAG = "[inbox decision]"


def http(method, path, token, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


GATEWAY = None


def fail(why):
    """Ends the test at once, from any thread: SystemExit in a thread other than the main one
    ends only that thread, and the main one would wait for a gateway that never comes back."""
    print(f"waits crash test failed: {why}", file=sys.stderr, flush=True)
    print(f"waits-crash: 0 passed, 1 failed ({why})", flush=True)
    if GATEWAY is not None and GATEWAY.proc is not None and GATEWAY.proc.poll() is None:
        GATEWAY.proc.kill()
    os._exit(1)


class Gateway:
    def __init__(self):
        self.proc = None
        self.lock = threading.Lock()
        self.kills = 0

    def start(self):
        with self.lock:
            self.proc = subprocess.Popen(
                [os.path.join(BIN, "tern"), "gateway", "--listen", f"127.0.0.1:{PORT}"],
                stdout=subprocess.DEVNULL,
                stderr=LOG,
            )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(URL + "/health", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        fail("the gateway did not start within 30 s; see gateway.log")

    def kill9(self):
        with self.lock:
            self.proc.kill()  # SIGKILL
            self.proc.wait()
            self.kills += 1

    def stop(self):
        with self.lock:
            if self.proc and self.proc.poll() is None:
                self.proc.terminate()
                self.proc.wait(timeout=30)


def admin_token():
    with open(os.path.join(HOME, "inbox-admin.json")) as f:
        return json.load(f)["token"]


def retry(what, fn, attempts=600):
    """Calls fn until it answers (the gateway may be down for a moment)."""
    for _ in range(attempts):
        try:
            return fn()
        except DOWN:
            time.sleep(0.05)
    fail(f"{what}: the gateway stayed unreachable")


def start_killer(gw, rng, pause):
    """Kill -9s and restarts the gateway at random moments, `pause` (seconds: low, high)
    apart, until the returned event is set; the gateway is up when the returned thread
    ends."""
    done = threading.Event()

    def killer():
        try:
            while not done.is_set():
                time.sleep(rng.uniform(*pause))
                if done.is_set():
                    break
                gw.kill9()
                time.sleep(rng.uniform(0.0, 0.3))
                gw.start()
        except BaseException as e:  # noqa: BLE001 - whatever stops the killer ends the test
            fail(f"the killer thread: {e!r}")

    k = threading.Thread(target=killer)
    k.start()
    return done, k


def session_view(sid):
    """The session and its open waits, once the gateway answers and no turn of it runs (a
    chat cut short by our timeout could still be running; a killed one is reset at start)."""
    deadline = time.time() + 60
    while True:
        try:
            status, body = http("GET", f"/api/sessions/{sid}", KEY, timeout=10)
        except DOWN:
            if time.time() > deadline + STEP_SECS:
                fail(f"session {sid}: the gateway stayed unreachable")
            time.sleep(0.05)
            continue
        if status == 200:
            s = body.get("session", body)
            waits = body.get("waits") or s.get("waits") or []
            if s.get("status") != "running" or time.time() > deadline:
                return s, waits
        time.sleep(0.05)


def ask(n):
    """Creates a session and has it ask once, retrying the chat until the session has its
    wait. Returns the session id and how many chats it took."""
    deadline = time.time() + STEP_SECS
    while True:
        if time.time() > deadline:
            fail(f"session {n}: not created within {STEP_SECS} s")
        try:
            status, s = http("POST", "/api/sessions", KEY, {}, timeout=10)
        except DOWN:
            time.sleep(0.05)
            continue
        if status == 201:
            sid = s["session"]["id"]
            break
        time.sleep(0.05)  # starting up
    chats = 0
    while True:
        if time.time() > deadline:
            fail(f"session {sid}: no wait after {chats} chats in {STEP_SECS} s")
        chats += 1
        try:
            http("POST", f"/api/sessions/{sid}/chat", KEY, {"message": f"ask: deploy step {n}"}, timeout=60)
        except DOWN:
            pass  # killed mid-chat: did the wait get recorded before?
        _, waits = session_view(sid)
        if waits:
            return sid, chats
        time.sleep(0.05)


def verdict(sid, rid):
    """Whether the session is done right: settled (idle, no open wait), exactly one decision
    message (its own), answered afterwards by the agent (not just `[interrupted]`), in a
    well-formed transcript. Returns (ok, what is wrong)."""
    _, body = retry("session", lambda: http("GET", f"/api/sessions/{sid}", KEY))
    s = body.get("session", body)
    settled = s.get("status") == "idle" and not (body.get("waits") or s.get("waits"))
    _, body = retry("messages", lambda: http("GET", f"/api/sessions/{sid}/messages", KEY))
    msgs = body.get("data") or body.get("messages") or []
    tagged = [
        i for i, m in enumerate(msgs)
        if m.get("role") == "user" and (m.get("content") or "").startswith(DECISION_TAG)
    ]
    mine = [i for i in tagged if rid in msgs[i]["content"]]
    others = len(tagged) - len(mine)
    answered = bool(mine) and any(
        m.get("role") == "assistant" and (m.get("content") or "").strip() not in ("", INTERRUPTED)
        for m in msgs[mine[-1] + 1:]
    )
    formed = well_formed(msgs)
    ok = settled and len(mine) == 1 and not others and answered and formed
    return ok, (
        f"{len(mine)} decision messages (+{others} others), answered={answered}, "
        f"well-formed={formed}, settled={settled}; transcript: " + " | ".join(brief(m) for m in msgs)
    )


def brief(m):
    """A message in a few words, for the report of a failed session."""
    calls = ",".join(c.get("function", {}).get("name", "?") for c in (m.get("tool_calls") or []))
    text = (m.get("content") or "").replace("\n", " ")[:40]
    return f"{m.get('role')}{'[' + calls + ']' if calls else ''}: {text}"


def well_formed(msgs):
    """Every tool result follows the assistant message that called it (or another result of
    the same call batch): nothing — a decision message included — comes in between."""
    open_calls = set()
    for m in msgs:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in open_calls:
                return False
            open_calls.discard(m.get("tool_call_id"))
        else:
            open_calls = {c.get("id") for c in (m.get("tool_calls") or [])} if m.get("role") == "assistant" else set()
    return True


def main():
    rng = random.Random(SEED)
    print(f"waits crash test: {SESSIONS} sessions, seed {SEED}", flush=True)
    global GATEWAY
    gw = GATEWAY = Gateway()
    # Whatever happens, no gateway outlives the script.
    atexit.register(lambda: gw.proc and gw.proc.poll() is None and gw.proc.kill())
    gw.start()

    # Every session asks once, while the gateway is killed at random (often: asking is
    # quick); a chat cut short before the session got its wait is asked again.
    done, k = start_killer(gw, rng, (0.05, 0.3))
    sessions = []
    retried = 0
    for n in range(SESSIONS):
        sid, chats = ask(n)
        sessions.append(sid)
        retried += chats - 1
    done.set()
    k.join()
    asking_kills = gw.kills
    if asking_kills == 0:
        fail("the gateway was never killed while the sessions asked")
    print(f"asked in {SESSIONS} sessions; the gateway was killed {asking_kills} times, {retried} chats retried", flush=True)

    # Each session's wait, once its request exists (a wait recorded just before a kill gets
    # its request when the gateway starts again).
    problems = []
    by_session = {}
    deadline = time.time() + 60
    for sid in sessions:
        while True:
            _, waits = session_view(sid)
            if len(waits) != 1 or waits[0].get("requestId") or time.time() > deadline:
                break
            time.sleep(0.1)
        if len(waits) != 1 or not waits[0].get("requestId"):
            problems.append(f"{sid}: {len(waits)} waits after asking: {waits}")
            continue
        by_session[sid] = waits[0]["requestId"]

    # The requests in the inbox: exactly the sessions' (no retried chat asked twice).
    requests = set()
    before = None
    while True:
        q = "/inbox/api/requests?status=pending&limit=200" + (f"&before={before}" if before else "")
        status, page = http("GET", q, admin_token())
        assert status == 200, (status, page)
        requests.update(item["id"] for item in page["items"])
        before = page.get("nextCursor")
        if not before:
            break
    if requests != set(by_session.values()):
        problems.append(
            f"{len(requests)} pending requests for {len(by_session)} waits: "
            f"{len(requests - set(by_session.values()))} without a wait, "
            f"{len(set(by_session.values()) - requests)} waits without a pending request"
        )

    # Decide them over time while the killer goes on.
    done, k = start_killer(gw, rng, (0.2, 0.8))
    order = list(by_session.items())
    rng.shuffle(order)
    decided = 0
    for sid, rid in order:
        deadline = time.time() + STEP_SECS
        while True:
            if time.time() > deadline:
                fail(f"deciding {rid}: no answer within {STEP_SECS} s")
            try:
                status, body = http(
                    "POST", f"/inbox/api/requests/{rid}/decide", admin_token(),
                    {"outcome": {"type": "APPROVE", "note": f"ok {sid}"}}, timeout=10,
                )
            except DOWN:
                time.sleep(0.05)
                continue
            if status in (200, 409):  # 409: an earlier attempt got through before a kill
                decided += 1
                break
            if status == 401:  # a restart replaced the admin token
                time.sleep(0.05)
                continue
            fail(f"deciding {rid}: {status} {body}")
        time.sleep(rng.uniform(0.01, 0.06))
    done.set()
    k.join()
    print(f"decided {decided} requests; the gateway was killed {gw.kills - asking_kills} times", flush=True)
    if gw.kills == asking_kills:
        fail("the gateway was never killed while the requests were decided")

    # Let the last gateway catch up: every wait delivered and answered (a resume whose turn
    # failed is retried after a pause, with the session idle meanwhile).
    verdicts = {}
    deadline = time.time() + 120
    todo = [sid for sid in sessions if sid in by_session]
    while todo:
        for sid in todo:
            verdicts[sid] = verdict(sid, by_session[sid])
        todo = [sid for sid in todo if not verdicts[sid][0]]
        if not todo or time.time() > deadline:
            break
        time.sleep(0.5)
    # Once more for all: nothing changed a session after it looked done.
    verdicts = {sid: verdict(sid, rid) for sid, rid in by_session.items()}

    passed = failed = 0
    for sid in sessions:
        if sid not in by_session:
            failed += 1  # its wait was wrong after asking: already in the problems
        elif verdicts[sid][0]:
            passed += 1
        else:
            failed += 1
            problems.append(f"{sid}: {verdicts[sid][1]}")
    gw.stop()
    for p in problems[:20]:
        print("  " + p)
    # One test for the totals of .ci/run; the sessions are its checks.
    ok = 1 if failed == 0 and not problems else 0
    print(
        f"waits-crash: {ok} passed, {1 - ok} failed "
        f"({passed} of {len(sessions)} sessions got their decision exactly once, answered; "
        f"{gw.kills} kills)"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
