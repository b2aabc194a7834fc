#!/usr/bin/env bash
# The cost of metrics as the server's CPU time per request, which a busy machine disturbs far
# less than throughput: this build's `kura serve '*'`, scraped at GET /metrics once a second
# (as Prometheus would), against KURA_BASE (a build without metrics, or this build again),
# not scraped. Both serve the same REQUESTS requests of `kura bench` (90:10 get:set, 400-byte
# values, CONNS connections, PIPELINE deep, PROTO), alternating, REPS times; the server's
# user+system CPU time (/proc/PID/stat) is read before and after each run. Prints every run
# and the medians of ns of CPU a request, and this / base. Servers listen on 127.0.0.1 only and
# are stopped by their pids at exit; every `kura bench` is killed after 120 s.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KURA_BASE:?KURA_BASE=PATH/kura of the build to compare with}"
REPS=${REPS:-7} REQUESTS=${REQUESTS:-2000000} CONNS=${CONNS:-64} PIPELINE=${PIPELINE:-16}
PROTO=${PROTO:-text} THREADS=${THREADS:-2}
cargo build --release -q -p kura
KURA="$PWD/target/release/kura"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A PORT PID
for s in this base; do
	port=$(free_port)
	bin=$KURA; [ "$s" = base ] && bin=$KURA_BASE
	"$bin" serve '*' --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null &
	PIDS+=($!); PID[$s]=$!; PORT[$s]=$port
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
done
( while :; do curl -s -o /dev/null --max-time 5 "http://127.0.0.1:${PORT[this]}/metrics" || true; sleep 1; done ) &
PIDS+=($!)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
RAW=$(mktemp)
trap 'cleanup; rm -f "$RAW"' EXIT
for rep in $(seq "$REPS"); do
	order="this base"; ((rep % 2 == 0)) && order="base this"
	for s in $order; do
		before=$(ticks "${PID[$s]}")
		timeout 120 "$KURA" bench --port "${PORT[$s]}" --protocol "$PROTO" --connections "$CONNS" \
			--threads 2 --pipeline "$PIPELINE" --ratio 9:1 --requests "$REQUESTS" --preload \
			--key-size 100 --value-size 400 --keyspace 10000 >/dev/null
		after=$(ticks "${PID[$s]}")
		ns=$(( (after - before) * 1000000000 / hz / REQUESTS ))
		echo "$s $ns" >>"$RAW"
		echo "rep $rep: $s: $ns ns of server CPU a request" >&2
	done
done
awk '
	function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
	{ n[$1]++; v[$1, n[$1]] = $2 }
	END {
		for (s in n) { delete a; for (j = 1; j <= n[s]; j++) a[j] = v[s, j]; m[s] = med(a, n[s]) }
		printf "server CPU a request (median of %d): base %d ns, this (scraped every second) %d ns, this / base %.3f\n", n["this"], m["base"], m["this"], m["this"] / m["base"]
	}' "$RAW"
