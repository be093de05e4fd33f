#!/usr/bin/env bash
# Runs the Pump Up Python SDK suite (`pumpup-sdk` 0.0.10) against a real `tern gateway`; the
# human side is `tern inbox`, run by the suite with the gateway's TERN_HOME. Needs
# `pip install pumpup-sdk==0.0.10`. Prints "pumpup-sdk: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q -p tern-cli
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

export TERN_HOME="$work/home"
mkdir -p "$TERN_HOME"
unset TERN_SERVER_KEY TERN_INBOX_URL TERN_INBOX_TOKEN TERN_API_KEY OPENAI_API_KEY

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
"$bin/tern" gateway --listen "127.0.0.1:$port" 2> "$work/gateway.log" &
pids+=($!)
# Ready once it answers /health and has written its admin file (address and admin token)
# and the first agent key.
for _ in $(seq 300); do
    if python3 -c "import urllib.request; urllib.request.urlopen('$url/health')" 2>/dev/null \
        && [ -s "$TERN_HOME/inbox-admin.json" ] && [ -s "$TERN_HOME/gateway.key" ]; then
        break
    fi
    sleep 0.1
done

if ! TERN_GATEWAY_URL="$url" TERN_KEY="$(cat "$TERN_HOME/gateway.key")" TERN_BIN="$bin/tern" \
    python3 tests/python/test_pumpup_sdk.py; then
    echo "--- gateway log ---"
    cat "$work/gateway.log"
    exit 1
fi
