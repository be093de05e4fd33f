"""The official OpenAI Python SDK against a running tern gateway.

The gateway's model is tern's fake model (`tern-bench serve`): a user message `sh:CMD` makes
it call the `terminal` tool with CMD, and it answers "done" after the tool result. So every
answer below went through a real tool call inside the gateway.
"""

import json
import os
import sys
import traceback
import urllib.request

import openai
from openai import OpenAI

BASE = os.environ["TERN_GATEWAY_URL"]
KEY = os.environ["TERN_KEY"]
client = OpenAI(base_url=BASE + "/v1", api_key=KEY)


def session_messages(session_id):
    req = urllib.request.Request(
        f"{BASE}/api/sessions/{session_id}/messages",
        headers={"Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(req) as r:
        return json.load(r)["data"]


def test_non_streaming():
    raw = client.chat.completions.with_raw_response.create(
        model="tern", messages=[{"role": "user", "content": "sh:echo sdk-check-one"}]
    )
    r = raw.parse()
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "done", r
    assert r.choices[0].finish_reason == "stop"
    session_id = raw.headers["x-hermes-session-id"]
    msgs = session_messages(session_id)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"], msgs
    assert "sdk-check-one" in msgs[2]["content"], msgs[2]


def test_streaming():
    stream = client.chat.completions.create(
        model="tern",
        messages=[{"role": "user", "content": "sh:echo sdk-check-two"}],
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "done", text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_continues_a_stored_session():
    raw = client.chat.completions.with_raw_response.create(
        model="tern", messages=[{"role": "user", "content": "sh:echo first"}]
    )
    session_id = raw.headers["x-hermes-session-id"]
    stream = client.chat.completions.create(
        model="tern",
        messages=[{"role": "user", "content": "sh:echo second"}],
        stream=True,
        extra_headers={"X-Hermes-Session-Id": session_id},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "done"
    msgs = session_messages(session_id)
    assert len(msgs) == 8, msgs
    assert "second" in msgs[6]["content"]


def test_models():
    models = client.models.list()
    assert [m.id for m in models.data] == ["fake-model"]


def test_wrong_key_is_an_authentication_error():
    bad = OpenAI(base_url=BASE + "/v1", api_key="wrong-key", max_retries=0)
    try:
        bad.chat.completions.create(model="tern", messages=[{"role": "user", "content": "hi"}])
    except openai.AuthenticationError as e:
        assert e.status_code == 401
        assert e.body["code"] == "invalid_api_key", e.body
    else:
        raise AssertionError("expected a 401")


def main():
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
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
    print(f"python-sdk: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
