#!/usr/bin/env bash
# Build kura and open the default embedded database `casket.kh` in the current directory
# (created when missing), printing what it holds. Extra arguments go to `kura db`, e.g.
#   scripts/run.sh put casket.kh hello world
# The network server (`kura serve`, the default once it lands) is tracked as the next issue.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cargo build --release --manifest-path "$root/Cargo.toml" -p kura >&2
kura="$root/target/release/kura"
if [ $# -eq 0 ]; then
    [ -e casket.kh ] || "$kura" db create casket.kh
    exec "$kura" db inform casket.kh
fi
exec "$kura" db "$@"
