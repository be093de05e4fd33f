#!/usr/bin/env bash
# The durable-waits crash test: 200 sessions ask, and their requests are decided over time,
# while the gateway is killed with SIGKILL at random moments and restarted; then every
# session must have had one wait, and its decision must be in it exactly once, and answered.
# Prints "waits-crash: 1 passed, 0 failed (…)".
# WAITS_CRASH_SESSIONS (default 200) and WAITS_CRASH_SEED (default: the time) vary it.
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
mkdir -p "$work/home"
export TERN_HOME="$work/home" TERN_SERVER_KEY="crash-suite-key-$RANDOM$RANDOM$RANDOM" TERN_BIN_DIR="$bin"
export TERN_PORT
TERN_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
unset OPENAI_API_KEY

if ! python3 tests/crash/waits_crash.py; then
    echo "--- gateway log (last 60 lines) ---"
    tail -n 60 "$work/gateway.log" || true
    exit 1
fi
