#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
# Installs what the tests need, then: format check, clippy, every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }

if ! need cargo; then
    echo "test.sh: cargo (Rust 1.80 or newer) is required; install it with rustup" >&2
    exit 1
fi
# rustfmt and clippy come with rustup's default profile; add them when missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if need rustup; then
        rustup component add rustfmt clippy
    else
        echo "test.sh: cargo fmt and cargo clippy are required" >&2
        exit 1
    fi
fi

# Tokyo and Kyoto Cabinet's tools, for the migration test (crates/kura/tests/migrate.rs), which
# fails instead of skipping when KURA_PEER_TESTS is set.
if ! need tchmgr || ! need tcbmgr || ! need kchashmgr; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq tokyocabinet-bin kyotocabinet-utils >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq tokyocabinet-bin kyotocabinet-utils >/dev/null; }
fi
export KURA_PEER_TESTS=1

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "== fuzz (a short run of every target; longer runs: scripts/fuzz.sh)"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" scripts/fuzz.sh

# The differential test (crates/kura/tests/mc_differential.rs) compares kura serve with a
# memcached 1.6.18 it starts: the Debian package. With CI=true it fails when memcached is
# missing, so install it first.
if ! [ -x /usr/bin/memcached ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq memcached >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq memcached >/dev/null; }
fi
# Debian's redis-server (with redis-tools) is the reference peer: twemproxy.rs runs its redis-mode
# test in front of it as well as in front of kura serve, and scripts/redis-client-tests.sh can run
# redis-py's tests against it. With CI=true twemproxy.rs fails when it is missing.
if ! [ -x /usr/bin/redis-server ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq redis-server >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
fi
# The twemproxy tests (crates/kura/tests/twemproxy.rs, twemproxy_failover.rs) start Debian's
# nutcracker in front of three kura serve (with replicas and scripts/failover.sh in the second)
# and run memccapable (libmemcached-tools) through it. With CI=true they fail
# when nutcracker is missing, unless its package cannot be installed here (KURA_NO_NUTCRACKER).
if ! [ -x /usr/sbin/nutcracker ] || ! need memccapable; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq nutcracker libmemcached-tools >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq nutcracker libmemcached-tools >/dev/null 2>&1; } ||
        { echo "test.sh: nutcracker cannot be installed here: the twemproxy tests are skipped"; export KURA_NO_NUTCRACKER=1; }
fi

# The Redis protocol's tests (crates/kura/tests/serve_redis.rs) drive the server with Debian's
# redis-cli (redis-tools). With CI=true they fail when it is missing, so install it first.
if ! need redis-cli; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq redis-tools >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq redis-tools >/dev/null; }
fi

echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-targets 2>&1 | tee "$log"
cargo test --workspace --doc 2>&1 | tee -a "$log"

echo "== client libraries (Python venv in .venv)"
scripts/client-tests.sh 2>&1 | tee -a "$log"

# One closing line for the whole suite (cargo prints one per test binary, pytest its own).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^[0-9]+ passed/ { p += $1 }
     /^(perl|memccapable|memcdump|tcrmgr): [0-9]+ passed/ { p += $2 }
     / [0-9]+ failed/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed/) f += $i }
     END { printf "tests: %d passed, %d failed\n", p, f; exit (f > 0) }' "$log"
