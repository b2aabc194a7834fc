#!/usr/bin/env bash
# The cost of the update log and how fast a replica catches up, in one run on this machine.
# 1. Throughput: `kura serve P.kh` and `P.kh#sync=always` (EXT=kb: a B+ tree `.kb`), each with and without `--ulog`,
#    alternating, REPS repetitions, medians (memcached text protocol, 100-byte keys, 400-byte
#    values, CONNS connections; sets only and 1:1, unpipelined and PIPELINE deep).
# 2. Catch-up: a replica stopped while the master takes N (default 1,000,000) puts, then
#    started again: seconds until its position reaches the master's newest record.
# 3. Bootstrap: a new in-memory replica of that master (N keys): seconds until it holds them.
# Servers listen on 127.0.0.1 only and are stopped by their pids at exit; every step is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} SECS=${SECS:-2} THREADS=${THREADS:-2} CONNS=${CONNS:-128} PIPELINE=${PIPELINE:-16}
N=${N:-1000000} EXT=${EXT:-kh}
if [ -z "${KURA:-}" ]; then # KURA=PATH: that build instead (another build, for a before-and-after)
	cargo build --release -q -p kura
	KURA="$PWD/target/release/kura"
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.05; done; }
declare -A PORT
start() { # NAME
	local name=$1 port; port=$(free_port)
	case $name in
	kh) "$KURA" serve "$WORK/a$port.$EXT" --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	kh-ulog) "$KURA" serve "$WORK/b$port.$EXT" --port "$port" --threads "$THREADS" --sid 1 --ulog "$WORK/u$port" 2>/dev/null & ;;
	always) "$KURA" serve "$WORK/c$port.$EXT#sync=always" --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	always-ulog) "$KURA" serve "$WORK/d$port.$EXT#sync=always" --port "$port" --threads "$THREADS" --sid 1 --ulog "$WORK/v$port" 2>/dev/null & ;;
	esac
	PIDS+=($!); wait_port "$port"; PORT[$name]=$port
}
SERVERS="kh kh-ulog always always-ulog"
for s in $SERVERS; do start "$s"; done
RAW="$WORK/raw"
for rep in $(seq "$REPS"); do for depth in 1 "$PIPELINE"; do for ratio in 0:1 1:1; do
	order=$SERVERS; ((rep % 2 == 0)) && order=$(echo "$SERVERS" | tr ' ' '\n' | tac | tr '\n' ' ')
	for s in $order; do
		line=$(timeout $((SECS + 30)) "$KURA" bench --port "${PORT[$s]}" --protocol text --connections "$CONNS" \
			--threads "$THREADS" --pipeline "$depth" --ratio "$ratio" --duration "$SECS" --preload \
			--key-size 100 --value-size 400 --keyspace 10000 | grep '^RESULT' || echo "RESULT failed")
		ops=$(sed -n 's/.* ops_per_sec=\([0-9]*\).*/\1/p' <<<"$line")
		echo "$depth $ratio $s ${ops:-0}" >>"$RAW"
		echo "rep $rep: depth=$depth ratio=$ratio $s: ${ops:-?} ops/s" >&2
	done
done; done; done
printf '\n| pipeline | get:set | .%s | .%s + ulog | ratio | sync=always | always + ulog | ratio |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n' "$EXT" "$EXT"
sort -k1,1n -k2,2 "$RAW" | awk '
	function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
	{ k = $1 " " $2; keys[k] = 1; n[k, $3]++; o[k, $3, n[k, $3]] = $4 }
	END { split("kh kh-ulog always always-ulog", S, " ")
		for (k in keys) { for (i = 1; i <= 4; i++) { s = S[i]; c = n[k, s]; delete a; for (j = 1; j <= c; j++) a[j] = o[k, s, j]; m[s] = c ? med(a, c) : 0 }
			split(k, f, " ")
			printf "| %s | %s | %d | %d | %.2f | %d | %d | %.2f |\n", f[1], f[2], m["kh"], m["kh-ulog"], m["kh-ulog"] / m["kh"], m["always"], m["always-ulog"], m["always-ulog"] / m["always"] } }' | sort -t'|' -k2,2n -k3,3
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; PIDS=()

# Catch-up and bootstrap.
stat_of() { "$KURA" remote inform --port "$1" 2>/dev/null | sed -n "s/^$2: //p"; }
mp=$(free_port); rp=$(free_port); bp=$(free_port)
"$KURA" serve "$WORK/m.kh" --port "$mp" --sid 1 --ulog "$WORK/mlog" --ulog-limit 0 2>/dev/null & PIDS+=($!); wait_port "$mp"
"$KURA" serve "$WORK/r.kh" --port "$rp" --sid 2 --master "127.0.0.1:$mp" 2>/dev/null & rpid=$!; PIDS+=($rpid); wait_port "$rp"
sleep 1; kill "$rpid"; wait "$rpid" 2>/dev/null || true
python3 -c "
import sys
for i in range($N): sys.stdout.write('key%09d\tvalue-%d-0123456789012345678901234567890123456789012345678901234567890123456789\n' % (i, i))
" >"$WORK/in.tsv"
timeout 600 "$KURA" remote import --port "$mp" "$WORK/in.tsv" >/dev/null
last=$(stat_of "$mp" ulog_last_ts)
t0=$(date +%s.%N)
"$KURA" serve "$WORK/r.kh" --port "$rp" --sid 2 --master "127.0.0.1:$mp" 2>/dev/null & PIDS+=($!); wait_port "$rp"
for _ in $(seq 1200); do [ "$(stat_of "$rp" rts)" = "$last" ] && break; sleep 0.05; done
t1=$(date +%s.%N)
echo "catch-up of $N log records: $(echo "$t1 - $t0" | bc) s (rts $(stat_of "$rp" rts), master $last)"
t0=$(date +%s.%N)
"$KURA" serve '*' --port "$bp" --sid 3 --master "127.0.0.1:$mp" 2>/dev/null & PIDS+=($!); wait_port "$bp"
for _ in $(seq 2400); do [ "$(stat_of "$bp" records)" = "$N" ] && [ "$(stat_of "$bp" repl_bootstraps)" = 1 ] && break; sleep 0.05; done
t1=$(date +%s.%N)
echo "bootstrap of a $N-key master into '*': $(echo "$t1 - $t0" | bc) s (records $(stat_of "$bp" records))"
