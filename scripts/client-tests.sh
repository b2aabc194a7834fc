#!/usr/bin/env bash
# Client libraries and conformance tools written by others, against the real `kura serve`
# (debug build): pymemcache, pylibmc (libmemcached), python-binary-memcached (pytest, in a
# local virtual environment .venv), Perl Cache::Memcached and libmemcached's memccapable
# (Debian packages, installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkg() { # COMMAND-OR-FILE PACKAGE...
    local probe=$1; shift
    if [ -e "$probe" ] || command -v "$probe" >/dev/null 2>&1; then return 0; fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$@" >/dev/null; }
}
need_pkg memccapable libmemcached-tools
need_pkg /usr/share/perl5/Cache/Memcached.pm libcache-memcached-perl

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv || { need_pkg /nonexistent python3-venv && python3 -m venv .venv; }
fi
.venv/bin/pip install -q -r tests/clients/requirements.txt
cargo build -q -p kura
KURA="$PWD/target/debug/kura"

KURA_BIN="$KURA" .venv/bin/python -m pytest -q tests/clients

# The tools below need a running server: start one on a free port, stop it at the end.
work=$(mktemp -d)
log="$work/serve.log"
"$KURA" serve '*' --port 0 --threads 2 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$log")
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.05
done
[ -n "$addr" ] || { echo "kura serve did not start"; cat "$log"; exit 1; }

perl tests/clients/perl/cache_memcached.pl "$addr"

out=$(memccapable -h "${addr%:*}" -p "${addr##*:}" -t 5 2>&1) || true
failed=$(printf '%s\n' "$out" | grep -c '\[FAIL\]' || true)
total=$(printf '%s\n' "$out" | grep -cE '\[(pass|FAIL)\]' || true)
if [ "$total" -eq 0 ] || [ "$failed" -ne 0 ]; then
    printf '%s\n' "$out"
    echo "memccapable: $((total - failed)) passed, $failed failed"
    exit 1
fi
echo "memccapable: $total passed, 0 failed"
