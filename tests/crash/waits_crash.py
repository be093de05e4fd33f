"""Durable waits under kill -9: every decision is appended to its session exactly once and
answered.

200 sessions each ask for an approval (the fake model calls `request_approval`). A decider
approves the requests one by one over the reviewer API while a killer kill -9s the gateway
at random moments and starts it again on the same $TERN_HOME. When every request is decided
and the gateway has caught up, each session must hold exactly one decision message (a user
message that names its request id) followed by the agent's answer, and no open wait.

Run by tests/crash/run.sh, which builds the binaries and starts the fake model. Prints
`waits-crash: 1 passed, 0 failed (…)` (one test; the sessions are its checks).
"""

import atexit
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
        raise SystemExit("the gateway did not start; see gateway.log")

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
        except (OSError, urllib.error.URLError):
            time.sleep(0.05)
    raise SystemExit(f"{what}: the gateway stayed unreachable")


def main():
    rng = random.Random(SEED)
    print(f"waits crash test: {SESSIONS} sessions, seed {SEED}", flush=True)
    gw = Gateway()
    # Whatever happens, no gateway outlives the script.
    atexit.register(lambda: gw.proc and gw.proc.poll() is None and gw.proc.kill())
    gw.start()

    # Every session asks once; the turn ends at once with the request pending.
    sessions = []
    for n in range(SESSIONS):
        status, s = http("POST", "/api/sessions", KEY, {})
        assert status == 201, (status, s)
        sid = s["session"]["id"]
        status, out = http("POST", f"/api/sessions/{sid}/chat", KEY, {"message": f"ask: deploy step {n}"})
        assert status == 200, (status, out)
        sessions.append(sid)

    # The requests, mapped to their sessions through the session's task (`externalId`).
    status, listed = http("GET", f"/inbox/api/requests?status=pending&limit=200", admin_token())
    assert status == 200, (status, listed)
    requests = {}
    before = None
    while True:
        q = "/inbox/api/requests?status=pending&limit=200" + (f"&before={before}" if before else "")
        status, page = http("GET", q, admin_token())
        assert status == 200, (status, page)
        for item in page["items"]:
            status, view = http("GET", f"/inbox/api/requests/{item['id']}", admin_token())
            assert status == 200, (status, view)
            requests[item["id"]] = view
        before = page.get("nextCursor")
        if not before:
            break
    assert len(requests) == SESSIONS, f"{len(requests)} requests for {SESSIONS} sessions"
    by_session = {}
    for sid in sessions:
        status, body = http("GET", f"/api/sessions/{sid}", KEY)
        assert status == 200, (status, body)
        waits = body.get("waits") or body.get("session", {}).get("waits") or []
        assert len(waits) == 1, (sid, body)
        by_session[sid] = waits[0]["requestId"]
    assert set(by_session.values()) == set(requests), "every wait names one of the requests"

    # Decide them over time while a killer kill -9s the gateway at random moments.
    done = threading.Event()

    def killer():
        while not done.is_set():
            time.sleep(rng.uniform(0.2, 0.8))
            if done.is_set():
                break
            gw.kill9()
            time.sleep(rng.uniform(0.0, 0.3))
            gw.start()

    k = threading.Thread(target=killer)
    k.start()
    order = list(by_session.items())
    rng.shuffle(order)
    decided = 0
    for sid, rid in order:
        while True:
            try:
                status, body = http(
                    "POST", f"/inbox/api/requests/{rid}/decide", admin_token(),
                    {"outcome": {"type": "APPROVE", "note": f"ok {sid}"}}, timeout=10,
                )
            except (OSError, urllib.error.URLError):
                time.sleep(0.05)
                continue
            if status in (200, 409):  # 409: an earlier attempt got through before a kill
                decided += 1
                break
            if status == 401:  # a restart replaced the admin token
                time.sleep(0.05)
                continue
            raise SystemExit(f"deciding {rid}: {status} {body}")
        time.sleep(rng.uniform(0.01, 0.06))
    done.set()
    k.join()
    print(f"decided {decided} requests; the gateway was killed {gw.kills} times", flush=True)

    # Let the last gateway catch up: every wait delivered and answered.
    deadline = time.time() + 180
    pending = set(sessions)
    while pending and time.time() < deadline:
        for sid in list(pending):
            status, body = retry("session", lambda: http("GET", f"/api/sessions/{sid}", KEY))
            s = body.get("session", body)
            waits = body.get("waits") or s.get("waits") or []
            if s.get("status") == "idle" and not waits:
                pending.discard(sid)
        if pending:
            time.sleep(0.5)

    passed = failed = 0
    problems = []
    for sid, rid in by_session.items():
        status, body = retry("messages", lambda: http("GET", f"/api/sessions/{sid}/messages", KEY))
        msgs = body.get("data") or body.get("messages") or []
        decisions = [i for i, m in enumerate(msgs) if m.get("role") == "user" and rid in (m.get("content") or "")]
        answered = bool(decisions) and any(m.get("role") == "assistant" for m in msgs[decisions[-1] + 1:])
        if len(decisions) == 1 and answered and sid not in pending:
            passed += 1
        else:
            failed += 1
            problems.append(f"{sid}: {len(decisions)} decision messages, answered={answered}, settled={sid not in pending}")
    gw.stop()
    for p in problems[:20]:
        print("  " + p)
    # One test for the totals of .ci/run; the sessions are its checks.
    ok = 1 if failed == 0 else 0
    print(
        f"waits-crash: {ok} passed, {1 - ok} failed "
        f"({passed} of {len(by_session)} sessions got their decision exactly once, answered)"
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
