#!/usr/bin/env bash
# redis-py's own test suite (its PyPI sdist ships tests/; version pinned below) against a server
# this script starts on a free loopback port: REDIS_TARGET=kura (default; `kura serve '*'`, and
# `kura serve x.kt` for the hash tests) or REDIS_TARGET=redis (Debian's redis-server, no
# persistence: the same selection proven on the original). Runs tests/test_commands.py,
# test_pipeline.py and test_encoding.py minus the tests tests/clients/redis-py.txt deselects
# (each with its reason), with RESP3 (redis-py's default) and RESP2.
#   REDIS_TARGET=redis|kura  KURA=PATH (default: build target/debug/kura)
#   PROTOCOLS="3 2"          the RESP versions to run the suite with
#   --relist                 rewrite tests/clients/redis-py.txt from a recording against
#                            redis-server (the commands each test sends)
# Prints pytest's closing line per run ("N passed, …"), which scripts/test.sh counts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

REDIS_PY_VERSION=8.1.0
TARGET=${REDIS_TARGET:-kura}
PROTOCOLS=${PROTOCOLS:-"3 2"}
RELIST=
[ "${1:-}" = --relist ] && { RELIST=1; TARGET=redis; }
case $TARGET in redis | kura) ;; *) echo "REDIS_TARGET must be redis or kura" >&2; exit 2 ;; esac

need_pkg() { # COMMAND-OR-FILE PACKAGE...
    local probe=$1; shift
    if [ -e "$probe" ] || command -v "$probe" >/dev/null 2>&1; then return 0; fi
    if [ "${CI:-}" = true ] && ! command -v apt-get >/dev/null; then
        echo "redis-client-tests.sh: $probe is missing" >&2; return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$@" >/dev/null; }
}
[ "$TARGET" = redis ] && need_pkg /usr/bin/redis-server redis-server

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv || { need_pkg /nonexistent python3-venv && python3 -m venv .venv; }
fi
.venv/bin/pip install -q -r tests/clients/redis-py-requirements.txt

# The suite as released: the sdist, unpacked once into .venv (the tests import the sdist's own
# `redis` package, which is why it is not pip-installed).
SUITE=.venv/redis-py-$REDIS_PY_VERSION
if [ ! -f "$SUITE/tests/conftest.py" ]; then
    tmp=$(mktemp -d)
    .venv/bin/pip download -q --no-deps --no-binary :all: -d "$tmp" "redis==$REDIS_PY_VERSION"
    tar xzf "$tmp/redis-$REDIS_PY_VERSION.tar.gz" -C "$tmp"
    rm -rf "$SUITE" && mv "$tmp/redis-$REDIS_PY_VERSION" "$SUITE" && rm -rf "$tmp"
fi
LIST=$PWD/tests/clients/redis-py.txt

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Start redis-server (no persistence) on a free port; its address in $addr.
start_redis() {
    local port
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
            --dir "$work" --logfile "$work/redis-$port.log" >/dev/null 2>&1 &
        pids+=($!)
        for _ in $(seq 100); do
            redis-cli -p "$port" ping >/dev/null 2>&1 && { addr=127.0.0.1:$port; return 0; }
            kill -0 "${pids[-1]}" 2>/dev/null || break
            sleep 0.05
        done
    done
    echo "redis-server did not start" >&2; cat "$work"/redis-*.log >&2; return 1
}

# Start `kura serve NAME` on a free port; its address (from its "listening on" line) in $addr.
start_kura() {
    local log="$work/kura-$RANDOM.log"
    "$KURA" serve "$1" --port 0 --threads 2 >/dev/null 2>"$log" &
    pids+=($!)
    addr=
    for _ in $(seq 200); do
        addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$log")
        [ -n "$addr" ] && return 0
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.05
    done
    echo "kura serve $1 did not start" >&2; cat "$log" >&2; return 1
}

# run GROUP ADDR PROTOCOL [pytest options...]
run() {
    local group=$1 addr=$2 proto=$3; shift 3
    echo "== redis-py $REDIS_PY_VERSION's tests, group $group, RESP$proto, against $TARGET ($addr)"
    (cd "$SUITE" && PYTHONPATH="$ROOT/tests/clients" "$ROOT/.venv/bin/python" -m pytest -q \
        -p no:cacheprovider -p redis_py_select -o addopts= -o filterwarnings=ignore \
        --redis-url "redis://$addr/0" --redis-mod-url "redis://$addr/0" --protocol "$proto" \
        --kura-list "$LIST" --kura-group "$group" "$@" \
        tests/test_commands.py tests/test_pipeline.py tests/test_encoding.py)
}

if [ -n "$RELIST" ]; then
    start_redis
    (cd "$SUITE" && PYTHONPATH="$ROOT/tests/clients" "$ROOT/.venv/bin/python" -m pytest -q \
        -p no:cacheprovider -p redis_py_select -o addopts= -o filterwarnings=ignore \
        --redis-url "redis://$addr/0" --redis-mod-url "redis://$addr/0" \
        --kura-record "$work/record.jsonl" \
        tests/test_commands.py tests/test_pipeline.py tests/test_encoding.py) >"$work/relist.log" 2>&1 || true
    tail -1 "$work/relist.log"
    .venv/bin/python tests/clients/redis_py_select.py "$work/record.jsonl" >"$LIST"
    echo "wrote $LIST: $(grep -c '^[^# ]* skip ' "$LIST") deselected, $(grep -c '^[^# ]* table ' "$LIST") on a table"
    exit 0
fi

status=0
if [ "$TARGET" = redis ]; then
    start_redis
    strings=$addr table=$addr
else
    if [ -z "${KURA:-}" ]; then
        cargo build -q -p kura
        KURA="$PWD/target/debug/kura"
    fi
    start_kura '*'
    strings=$addr
    start_kura "$work/hashes.kt"
    table=$addr
fi
# pytest's exit status 5: the list left no test in that group.
for proto in $PROTOCOLS; do
    for group in strings table; do
        addr=$strings
        [ $group = table ] && addr=$table
        rc=0
        run $group "$addr" "$proto" || rc=$?
        [ $rc -eq 0 ] || [ $rc -eq 5 ] || status=1
    done
done
exit $status
