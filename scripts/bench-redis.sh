#!/usr/bin/env bash
# Kura's Redis protocol against Debian's redis-server, in one run, alternating, REPS repetitions,
# medians: redis-benchmark (Debian's redis-tools) `-t set,get` with CONNS connections (50, its
# default), N requests a test, random keys from a key space of KEYSPACE (`-r`), VSIZE-byte
# values, no pipelining and `-P 16` (DEPTHS).
# Servers (SERVERS picks some): redis (no persistence), redis-aof-everysec (appendonly yes,
# appendfsync everysec), redis-aof-always (appendfsync always), kura-mem (`kura serve '*'`),
# kura-kh (`kura serve P.kh`, default sync: Redis's everysec) and kura-kh-always
# (`P.kh#sync=always`: appendfsync always), kura with THREADS worker threads (1: redis-server
# runs its commands on one thread, and redis-benchmark needs the other core of this machine).
# Then memory per key (MEMKEYS keys key:%012d of VSIZE bytes loaded by `redis-cli --pipe` into a
# fresh redis and kura-mem): resident set size (VmRSS) growth over the count, and redis's INFO
# used_memory growth over the count (its allocator's own count; MEMKEYS=0 skips it).
# Every redis-benchmark is killed after 120 seconds, the load after 300; servers listen on
# 127.0.0.1 only and are stopped by their pids at exit. KURA=PATH uses that build instead of
# building target/release/kura.
# Apache Kvrocks, the durable Redis-protocol store, installs from none of the registries here
# (Debian, crates.io, PyPI, npm, the Go module proxy, Maven Central), so it is not measured.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} N=${N:-200000} CONNS=${CONNS:-50} KEYSPACE=${KEYSPACE:-100000} VSIZE=${VSIZE:-100}
THREADS=${THREADS:-1} DEPTHS=${DEPTHS:-"1 16"} MEMKEYS=${MEMKEYS:-1000000}
SERVERS=${SERVERS:-"redis redis-aof-everysec redis-aof-always kura-mem kura-kh kura-kh-always"}
for t in redis-server redis-benchmark redis-cli; do
	command -v "$t" >/dev/null || { echo "need $t: apt-get install -y redis-server" >&2; exit 1; }
done
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

declare -A PORT PID
# start NAME [TAG]: a fresh server of that kind; its port in PORT[NAME TAG], pid in PID[NAME TAG].
start() {
	local name=$1 key="$1${2:+ $2}" p d
	p=$(free_port)
	d="$WORK/$name${2:+-$2}"
	mkdir -p "$d"
	local redis=(redis-server --bind 127.0.0.1 --port "$p" --save '' --dir "$d" --logfile "$d/log")
	case $name in
	redis) "${redis[@]}" --appendonly no & ;;
	redis-aof-everysec) "${redis[@]}" --appendonly yes --appendfsync everysec & ;;
	redis-aof-always) "${redis[@]}" --appendonly yes --appendfsync always & ;;
	kura-mem) "$KURA" serve '*' --host 127.0.0.1 --port "$p" --threads "$THREADS" 2>"$d/log" & ;;
	kura-kh) "$KURA" serve "$d/b.kh" --host 127.0.0.1 --port "$p" --threads "$THREADS" 2>"$d/log" & ;;
	kura-kh-always) "$KURA" serve "$d/b.kh#sync=always" --host 127.0.0.1 --port "$p" --threads "$THREADS" 2>"$d/log" & ;;
	*) echo "unknown server $name" >&2; exit 2 ;;
	esac
	PIDS+=($!)
	PID[$key]=$!
	PORT[$key]=$p
	wait_port "$p"
}

echo "== $(date -u +%F) $(git rev-parse --short HEAD) $(uptime)"
echo "== redis-benchmark -t set,get -n $N -c $CONNS -r $KEYSPACE -d $VSIZE -P {${DEPTHS// /,}}, $REPS reps; kura --threads $THREADS"
echo "== $(redis-server --version)"
for s in $SERVERS; do start "$s"; done
RAW="$WORK/raw"
for rep in $(seq "$REPS"); do
	order=$SERVERS
	((rep % 2 == 0)) && order=$(echo "$SERVERS" | tr ' ' '\n' | tac | tr '\n' ' ')
	for depth in $DEPTHS; do
		for s in $order; do
			out=$(timeout 120 redis-benchmark -h 127.0.0.1 -p "${PORT[$s]}" -t set,get -n "$N" -c "$CONNS" \
				-P "$depth" -r "$KEYSPACE" -d "$VSIZE" --csv 2>/dev/null || true)
			for t in SET GET; do
				rps=$(sed -n "s/^\"$t\",\"\([0-9.]*\)\".*/\1/p" <<<"$out")
				echo "$depth $t $s ${rps:-0}" >>"$RAW"
				echo "rep $rep: -P $depth $t $s: ${rps:-failed} requests/s" >&2
			done
		done
	done
done

# Medians per depth, test and server; then each server over redis (no persistence).
echo
printf '%-20s' "requests/s"
for depth in $DEPTHS; do printf '%14s%14s' "SET -P $depth" "GET -P $depth"; done
echo
for s in $SERVERS; do
	printf '%-20s' "$s"
	for depth in $DEPTHS; do
		for t in SET GET; do
			m=$(awk -v d="$depth" -v t="$t" -v s="$s" '$1 == d && $2 == t && $3 == s { print $4 }' "$RAW" | sort -n |
				awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
			printf '%14.0f' "$m"
			echo "$depth $t $s $m" >>"$WORK/medians"
		done
	done
	echo
done
if [[ " $SERVERS " == *" redis "* ]]; then
	echo
	printf '%-20s' "over redis"
	for depth in $DEPTHS; do printf '%14s%14s' "SET -P $depth" "GET -P $depth"; done
	echo
	for s in $SERVERS; do
		printf '%-20s' "$s"
		for depth in $DEPTHS; do
			for t in SET GET; do
				awk -v d="$depth" -v t="$t" -v s="$s" '$1 == d && $2 == t { m[$3] = $4 }
					END { if (m["redis"] > 0) printf "%14.2f", m[s] / m["redis"]; else printf "%14s", "-" }' "$WORK/medians"
			done
		done
		echo
	done
fi
for s in $SERVERS; do kill "${PID[$s]}" 2>/dev/null || true; done

# Memory per key: a fresh redis and kura-mem, MEMKEYS distinct keys loaded through one pipe.
[ "$MEMKEYS" -gt 0 ] || exit 0
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
used_memory() { redis-cli -p "$1" info memory 2>/dev/null | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)$/\1/p'; }
echo
echo "== memory: $MEMKEYS keys key:%012d, $VSIZE-byte values, loaded by redis-cli --pipe"
printf '%-12s%10s%16s%14s%20s%10s\n' server keys "RSS growth MB" "RSS B/key" "used_memory B/key" "load s"
awk -v n="$MEMKEYS" -v vs="$VSIZE" 'BEGIN {
	v = sprintf("%" vs "s", ""); gsub(/ /, "x", v)
	for (i = 0; i < n; i++) { k = sprintf("key:%012d", i); printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, vs, v }
}' >"$WORK/load.resp"
for s in redis kura-mem; do
	start "$s" mem
	key="$s mem"
	before=$(rss_kb "${PID[$key]}") ub=$(used_memory "${PORT[$key]}")
	t0=$(date +%s.%N)
	timeout 300 redis-cli -p "${PORT[$key]}" --pipe <"$WORK/load.resp" >"$WORK/pipe-$s.log" 2>&1 ||
		{ echo "$s: the load failed: $(tail -3 "$WORK/pipe-$s.log")" >&2; continue; }
	t1=$(date +%s.%N)
	keys=$(redis-cli -p "${PORT[$key]}" dbsize | tr -d '\r')
	after=$(rss_kb "${PID[$key]}") ua=$(used_memory "${PORT[$key]}")
	um="-"
	# Kura's used_memory is its resident set size: only redis's own accounting is shown.
	[ "$s" = redis ] && [ -n "$ub" ] && [ -n "$ua" ] && um=$(awk -v a="$ua" -v b="$ub" -v n="$MEMKEYS" 'BEGIN { printf "%.1f", (a - b) / n }')
	awk -v s="$s" -v k="$keys" -v a="$after" -v b="$before" -v n="$MEMKEYS" -v um="$um" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
		'BEGIN { printf "%-12s%10s%16.1f%14.1f%20s%10.1f\n", s, k, (a - b) / 1024, (a - b) * 1024 / n, um, t }'
	kill "${PID[$key]}" 2>/dev/null || true
done
