#!/usr/bin/env bash
# twemproxy (Debian's nutcracker) in front of three `kura serve` shards (`.kh`, default sync)
# against the same nutcracker in front of three memcached (Debian package), in one run,
# alternating, REPS repetitions, medians; and each against direct connections to one shard
# (the proxy's cost). One nutcracker with two pools (deploy/nutcracker.yml's settings, its
# addresses rewritten), SHARD_THREADS worker threads per shard.
# Workload: `kura bench`, memcached text, 100-byte keys, VSIZE-byte values, CONNS connections,
# key space KEYSPACE preloaded, RATIOS (gets:sets), no pipelining; each run SECS seconds, each
# `kura bench` killed after SECS+30 seconds. Servers listen on 127.0.0.1 only and are stopped by
# their pids at exit. KURA=PATH uses that build instead of building target/release/kura.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} SECS=${SECS:-3} CONNS=${CONNS:-32} THREADS=${THREADS:-2} SHARD_THREADS=${SHARD_THREADS:-1}
VSIZE=${VSIZE:-400} KEYSPACE=${KEYSPACE:-10000} RATIOS=${RATIOS:-"9:1 0:1"}
NUTCRACKER=$(command -v nutcracker || echo /usr/sbin/nutcracker)
[ -x "$NUTCRACKER" ] || { echo "need nutcracker: apt-get install -y nutcracker" >&2; exit 1; }
command -v memcached >/dev/null || { echo "need memcached: apt-get install -y memcached" >&2; exit 1; }
if [ -z "${KURA:-}" ]; then
	cargo build --release -q -p kura
	KURA="$PWD/target/release/kura"
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

KPORTS=() MPORTS=()
for i in 0 1 2; do
	p=$(free_port)
	"$KURA" serve "$WORK/s$i.kh" --host 127.0.0.1 --port "$p" --threads "$SHARD_THREADS" 2>/dev/null &
	PIDS+=($!) KPORTS+=("$p")
	p=$(free_port)
	memcached -u root -l 127.0.0.1 -p "$p" -t "$SHARD_THREADS" -U 0 -m 1024 -c 4096 &
	PIDS+=($!) MPORTS+=("$p")
done
KPROXY=$(free_port) MPROXY=$(free_port)
# deploy/nutcracker.yml's pool, once per kind of shard, with the addresses rewritten.
pool() { # NAME LISTEN-PORT SHARD-PORT...
	local name=$1 listen=$2; shift 2
	local ports=("$@") i=0
	while IFS= read -r line; do
		case $line in
		kura:) echo "$name:" ;;
		*listen:*) echo "  listen: 127.0.0.1:$listen" ;;
		*"- "*:*:*) echo "    - 127.0.0.1:${ports[$i]}:${line##*:}"; i=$((i + 1)) ;;
		*) echo "$line" ;;
		esac
	done < <(grep -v '^ *#' deploy/nutcracker.yml)
}
{ pool kura "$KPROXY" "${KPORTS[@]}"; pool memcached "$MPROXY" "${MPORTS[@]}"; } >"$WORK/nutcracker.yml"
"$NUTCRACKER" -t -c "$WORK/nutcracker.yml" >/dev/null
"$NUTCRACKER" -c "$WORK/nutcracker.yml" -s "$(free_port)" -a 127.0.0.1 -o "$WORK/nutcracker.log" &
PIDS+=($!)
for p in "${KPORTS[@]}" "${MPORTS[@]}" "$KPROXY" "$MPROXY"; do wait_port "$p"; done

declare -A PORT=([proxy-kura]=$KPROXY [proxy-memcached]=$MPROXY [direct-kura]=${KPORTS[0]} [direct-memcached]=${MPORTS[0]})
TARGETS="proxy-kura proxy-memcached direct-kura direct-memcached"
RAW="$WORK/raw"
echo "== $(date -u +%F) $(git rev-parse --short HEAD) $(uptime)"
echo "== text, $CONNS connections, $THREADS client threads, 100-byte keys, $VSIZE-byte values, $SECS s a run, $REPS reps"
for rep in $(seq "$REPS"); do
	for ratio in $RATIOS; do
		order=$TARGETS; ((rep % 2 == 0)) && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
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
# Medians per ratio and target; then kura / memcached through the proxy, and proxy / direct.
sort -k1,1 -k2,2 -k3,3n "$RAW" | awk -v reps="$REPS" '
{ k = $1 " " $2; n[k]++; v[k, n[k]] = $3; p[k, n[k]] = $4 }
END {
	m = int((reps + 1) / 2)
	for (k in n) { split(k, a, " "); med[a[1], a[2]] = v[k, m]; ratios[a[1]] = 1 }
	printf "%-6s %12s %12s %12s %12s %10s %10s %10s\n", "ratio", "proxy-kura", "proxy-mc", "direct-kura", "direct-mc", "kura/mc", "kura p/d", "mc p/d"
	for (r in ratios) {
		pk = med[r, "proxy-kura"]; pm = med[r, "proxy-memcached"]; dk = med[r, "direct-kura"]; dm = med[r, "direct-memcached"]
		printf "%-6s %12d %12d %12d %12d %10.2f %10.2f %10.2f\n", r, pk, pm, dk, dm, (pm ? pk / pm : 0), (dk ? pk / dk : 0), (dm ? pm / dm : 0)
	}
}'
