#!/usr/bin/env bash
# Build kura and serve the default embedded database `casket.kh` (created in the current
# directory when missing) on 127.0.0.1:1978 — memcached clients can connect there. Extra
# arguments go to `kura serve` (e.g. `scripts/run.sh '*' --port 11211`); Ctrl-C stops it
# cleanly (the database is synced and closed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cargo build --release --manifest-path "$root/Cargo.toml" -p kura >&2
exec "$root/target/release/kura" serve "$@"
