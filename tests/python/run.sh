#!/usr/bin/env bash
# Runs the OpenAI Python SDK suite against a real `tern gateway` whose model is tern's fake
# model (`tern-bench serve`). Needs `pip install openai`. Prints "python-sdk: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q -p tern-cli -p tern-bench
bin=$(cargo metadata -q --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$bin/tern-bench" serve > "$work/fake.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q OPENAI_BASE_URL "$work/fake.out" && break; sleep 0.1; done
# shellcheck disable=SC2046
export $(grep OPENAI_BASE_URL "$work/fake.out")
export TERN_HOME="$work/home" TERN_SERVER_KEY="sdk-suite-key-$RANDOM$RANDOM$RANDOM"
unset OPENAI_API_KEY

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/tern" gateway --listen "127.0.0.1:$port" 2> "$work/gateway.log" &
pids+=($!)
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health')" 2>/dev/null && break
    sleep 0.1
done

if ! TERN_GATEWAY_URL="http://127.0.0.1:$port" TERN_KEY="$TERN_SERVER_KEY" python3 tests/python/test_openai_sdk.py; then
    echo "--- gateway log ---"
    cat "$work/gateway.log"
    exit 1
fi
