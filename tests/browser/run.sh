#!/usr/bin/env bash
# Runs the web inbox's browser test: a real `tern gateway` (its model is tern's fake model,
# `tern-bench serve`), requests created through the agent API with the agent key, and a
# reviewer in real headless Chromium (the system `chromium` package, driven by
# playwright-core) who logs in by link and clicks through the inbox.
# Needs chromium and `npm ci` in this directory. Prints "browser: N passed, N failed";
# screenshots go to <cargo target dir>/browser-artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q -p tern-cli -p tern-bench
target=$(cargo metadata -q --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target/debug"

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
export TERN_HOME="$work/home" TERN_SERVER_KEY="browser-suite-key-$RANDOM$RANDOM$RANDOM"
unset OPENAI_API_KEY

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
"$bin/tern" gateway --listen "127.0.0.1:$port" 2> "$work/gateway.log" &
pids+=($!)
for _ in $(seq 200); do
    python3 -c "import urllib.request; urllib.request.urlopen('$url/health')" 2>/dev/null && break
    sleep 0.1
done

# The login link: the one the gateway prints for `admin` on its first start, else a new
# reviewer's from `tern inbox reviewers add`.
login=""
for _ in $(seq 50); do
    login=$(grep -o "http[^ ]*/inbox/login/[0-9A-Za-z_-]*" "$work/gateway.log" | head -n1 || true)
    [ -n "$login" ] && break
    sleep 0.1
done
if [ -z "$login" ]; then
    login=$("$bin/tern" inbox reviewers add browser-tester 2>/dev/null \
        | grep -o "http[^ ]*/inbox/login/[0-9A-Za-z_-]*" | head -n1 || true)
fi
if [ -z "$login" ]; then
    echo "no login link: the gateway printed none and \`tern inbox reviewers add\` gave none"
    cat "$work/gateway.log"
    echo "browser: 0 passed, 1 failed"
    exit 1
fi

artifacts="$target/browser-artifacts"
mkdir -p "$artifacts"
if ! TERN_GATEWAY_URL="$url" TERN_KEY="$TERN_SERVER_KEY" TERN_LOGIN_URL="$login" \
    ARTIFACTS="$artifacts" CHROMIUM="${CHROMIUM:-/usr/bin/chromium}" \
    node tests/browser/inbox.test.mjs; then
    echo "--- gateway log ---"
    cat "$work/gateway.log"
    exit 1
fi
