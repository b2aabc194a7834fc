#!/usr/bin/env bash
# The seed-004 bulk load: N records (15-byte keys, values of 100-180 bytes, 140 on average)
# through the memcached
# text protocol into an on-disk .kh served by `kura serve`, then every one read back and
# compared; the server is restarted in between (like the original test, to start cold).
# Prints elapsed times, the server's peak RSS and the file size. Bounded by N.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000000} CONNS=${CONNS:-8} DEPTH=${DEPTH:-64} THREADS=${THREADS:-2}
DB_PARAMS=${DB_PARAMS:-}
cargo build --release -q -p kura
KURA="$PWD/target/release/kura"
WORK=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/kura-bulk.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$WORK"' EXIT

serve() {
	"$KURA" serve "$WORK/bulk.kh$DB_PARAMS" --port 0 --threads "$THREADS" 2>"$WORK/log" &
	pid=$!
	for _ in $(seq 200); do
		addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$WORK/log")
		[ -n "$addr" ] && break
		sleep 0.05
	done
	port=${addr##*:}
}
hwm() { awk '/VmHWM/ {print $2}' "/proc/$pid/status"; }
stop() { kill "$pid"; wait "$pid" || true; pid=; }

serve
echo "bulk: loading $N records over $CONNS connections, $DEPTH deep (database bulk.kh$DB_PARAMS)" >&2
"$KURA" bench --port "$port" --bulk "$N" --connections "$CONNS" --pipeline "$DEPTH" | tee "$WORK/load"
load_hwm=$(hwm)
stop
size=$(du -sb "$WORK/bulk.kh" | cut -f1)
serve
"$KURA" bench --port "$port" --bulk "$N" --verify --connections "$CONNS" --pipeline "$DEPTH" | tee "$WORK/verify"
verify_hwm=$(hwm)
stop
ls=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' "$WORK/load" | tail -1)
vs=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' "$WORK/verify" | tail -1)
printf '\n| records | load | read back + verify | server peak RSS (load / read) | file size |\n|---:|---:|---:|---:|---:|\n'
printf '| %s | %s s | %s s | %s / %s MiB | %s MB |\n' "$N" "$ls" "$vs" "$((load_hwm / 1024))" "$((verify_hwm / 1024))" "$(awk "BEGIN {printf \"%.1f\", $size / 1e6}")"
