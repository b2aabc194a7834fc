#!/usr/bin/env bash
# The Tokyo Tyrant protocol against the memcached text protocol on the same Kura server, in one
# run, alternating which goes first, REPS repetitions, medians and ratios.
# Workload (like `tcrtest write` then `tcrtest read`): 8-byte keys `00000042` drawn from a key
# space of N, 8-byte values; a put phase of N requests, then a get phase of N requests.
# Shapes: one connection without pipelining (tcrtest's default), and CONNS connections over
# THREADS client threads, PIPELINE requests deep. Each server is a fresh `kura serve` on an
# on-disk database (default sync) per repetition, so both protocols see the same database state.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} N=${N:-200000} THREADS=${THREADS:-2} CONNS=${CONNS:-8} PIPELINE=${PIPELINE:-16}
DB=${DB:-kh}
cargo build --release -q -p kura
KURA="$PWD/target/release/kura"
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # a fresh server; sets PORT and PID
	PORT=$(free_port)
	local name="$WORK/t$PORT.kh"
	[ "$DB" = mem ] && name='*'
	"$KURA" serve "$name" --port "$PORT" --threads "$THREADS" 2>/dev/null &
	PID=$!
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.05; done
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }

RAW="$WORK/raw"
for rep in $(seq "$REPS"); do
	order="tyrant text"; ((rep % 2 == 0)) && order="text tyrant"
	for shape in single pipelined; do
		for proto in $order; do
			start
			if [ $shape = single ]; then args=(--connections 1 --threads 1 --pipeline 1)
			else args=(--connections "$CONNS" --threads "$THREADS" --pipeline "$PIPELINE"); fi
			for phase in put get; do
				ratio=0:1; [ $phase = get ] && ratio=1:0
				line=$("$KURA" bench --port "$PORT" --protocol "$proto" "${args[@]}" --key-size 8 \
					--value-size 8 --keyspace "$N" --requests "$N" --ratio "$ratio" | grep '^RESULT' || echo "RESULT failed")
				ops=$(sed -n 's/.* ops_per_sec=\([0-9]*\).*/\1/p' <<<"$line")
				p99=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$line")
				echo "$shape $phase $proto ${ops:-0} ${p99:-0}" >>"$RAW"
				echo "rep $rep: $shape $phase $proto: ${ops:-?} ops/s p99 ${p99:-?} us" >&2
			done
			stop
		done
	done
done
printf '\nmedians of %s runs; %s requests per phase, 8-byte keys and values, database %s\n\n' "$REPS" "$N" "$DB"
printf '| shape | phase | memcached text ops/s | Tyrant ops/s | Tyrant / text | p99 µs text / Tyrant |\n'
printf '|---|---|---:|---:|---:|---|\n'
sort -k1,1 -k2,2r "$RAW" | awk '
	function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
	{ k = $1 " " $2; if (!(k in seen)) { seen[k] = 1; keys[++nk] = k } c = ++n[k, $3]; o[k, $3, c] = $4; l[k, $3, c] = $5 }
	END {
		for (i = 1; i <= nk; i++) { k = keys[i]
			for (p = 1; p <= 2; p++) { s = (p == 1) ? "text" : "tyrant"; delete a; delete b
				for (j = 1; j <= n[k, s]; j++) { a[j] = o[k, s, j]; b[j] = l[k, s, j] }
				m[s] = med(a, n[k, s]); q[s] = med(b, n[k, s]) }
			split(k, f, " ")
			printf "| %s | %s | %d | %d | %.2f | %d / %d |\n", f[1], f[2], m["text"], m["tyrant"], m["tyrant"] / (m["text"] ? m["text"] : 1), q["text"], q["tyrant"]
		}
	}'
