#!/usr/bin/env bash
# Run every fuzz target for FUZZ_SECONDS seconds each (default 60). Stable Rust works: the
# targets are built without a sanitizer (`-s none`); a crash fails the run and leaves the input
# in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${FUZZ_SECONDS:-60}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for t in $(cargo fuzz list); do
    echo "-- fuzz $t for ${secs}s"
    if cargo fuzz run -s none "$t" -- -max_total_time="$secs" -rss_limit_mb=4096 >"$log" 2>&1; then
        grep -E "^Done" "$log" || true
    else
        grep -vE "^(INFO|#[0-9])" "$log" | tail -40
        echo "fuzz target $t FAILED" >&2
        status=1
    fi
done
exit $status
