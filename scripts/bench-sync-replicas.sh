#!/usr/bin/env bash
# The cost of replica-acknowledged writes: two masters (`.kh`, SYNC mode, --ulog), each with a
# replica on the same machine, one with `--sync-replicas 1`, one without; `kura bench` (memcached
# text, CONNS connections, RATIOS gets:sets, no pipelining, 100-byte keys, VSIZE-byte values,
# KEYSPACE keys preloaded) against each master, alternating, REPS repetitions, medians. Each
# run SECS seconds, each `kura bench` killed after SECS+30 s. Servers listen on 127.0.0.1 only
# and are stopped by their pids at exit. KURA=PATH uses that build instead of building
# target/release/kura.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} SECS=${SECS:-3} CONNS=${CONNS:-32} THREADS=${THREADS:-2} SYNC=${SYNC:-always}
VSIZE=${VSIZE:-400} KEYSPACE=${KEYSPACE:-10000} RATIOS=${RATIOS:-"0:1 9:1"}
if [ -z "${KURA:-}" ]; then
	cargo build --release -q -p kura
	KURA="$PWD/target/release/kura"
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 400); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

declare -A PORT
for t in plain acked; do
	mp=$(free_port) rp=$(free_port)
	extra=()
	[ "$t" = acked ] && extra=(--sync-replicas 1 --sync-replicas-timeout 5000)
	"$KURA" serve "$WORK/$t-m.kh#sync=$SYNC" --host 127.0.0.1 --port "$mp" --sid 1 \
		--ulog "$WORK/$t-m.ulog" "${extra[@]}" 2>"$WORK/$t-m.log" &
	PIDS+=($!)
	wait_port "$mp"
	"$KURA" serve "$WORK/$t-r.kh#sync=$SYNC" --host 127.0.0.1 --port "$rp" --sid 2 \
		--ulog "$WORK/$t-r.ulog" --master "127.0.0.1:$mp" 2>"$WORK/$t-r.log" &
	PIDS+=($!)
	wait_port "$rp"
	PORT[$t]=$mp
done
sleep 1
RAW="$WORK/raw"
echo "== $(date -u +%F) $(git rev-parse --short HEAD) $(uptime)"
echo "== sync=$SYNC, text, $CONNS connections, $THREADS client threads, unpipelined, 100-byte keys, $VSIZE-byte values, $SECS s a run, $REPS reps"
for rep in $(seq "$REPS"); do
	for ratio in $RATIOS; do
		order="plain acked"; ((rep % 2 == 0)) && order="acked plain"
		for t in $order; do
			line=$(timeout $((SECS + 30)) "$KURA" bench --port "${PORT[$t]}" --protocol text --connections "$CONNS" \
				--threads "$THREADS" --pipeline 1 --ratio "$ratio" --duration "$SECS" --preload \
				--key-size 100 --value-size "$VSIZE" --keyspace "$KEYSPACE" | grep '^RESULT' || echo "RESULT failed")
			ops=$(sed -n 's/.* ops_per_sec=\([0-9]*\).*/\1/p' <<<"$line"); p99=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$line")
			echo "$ratio $t ${ops:-0} ${p99:-0}" >>"$RAW"
			echo "rep $rep: ratio=$ratio $t: ${ops:-?} ops/s p99 ${p99:-?} us" >&2
		done
	done
done
sort -k1,1 -k2,2 -k3,3n "$RAW" | awk -v reps="$REPS" '
{ k = $1 " " $2; n[k]++; v[k, n[k]] = $3; p[k, n[k]] = $4 }
END {
	m = int((reps + 1) / 2)
	for (k in n) { split(k, a, " "); med[a[1], a[2]] = v[k, m]; pp[a[1], a[2]] = p[k, m]; ratios[a[1]] = 1 }
	printf "%-6s %12s %12s %10s %14s\n", "ratio", "plain", "acked", "acked/plain", "p99 us p/a"
	for (r in ratios) printf "%-6s %12d %12d %10.2f %7d/%d\n", r, med[r, "plain"], med[r, "acked"], (med[r, "plain"] ? med[r, "acked"] / med[r, "plain"] : 0), pp[r, "plain"], pp[r, "acked"]
}'
grep -h "repl_sync\|timeout" "$WORK"/acked-m.log | tail -3 || true
