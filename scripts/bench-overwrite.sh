#!/usr/bin/env bash
# Sustained overwrites: memcached and `kura serve P.kh` (default sync), each started alone and
# kept up for RUNS back-to-back runs of SECS seconds of set-only traffic over a small key space
# (100-byte keys, 400-byte values, KEYSPACE keys, CONNS connections, PIPELINE deep, binary
# protocol). After every run it prints throughput, p99, p99.9 and, for Kura, the size of the
# database directory: dead records must be reclaimed as fast as they are made, or the directory
# grows by the whole write volume (about 400 MB a second here) and the runs slow down.
# The pair is measured REPS times, alternating which goes first. Bounded: REPS*RUNS*SECS*2 s.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-2} RUNS=${RUNS:-4} SECS=${SECS:-2} THREADS=${THREADS:-2} CONNS=${CONNS:-128}
PIPELINE=${PIPELINE:-16} KEYSPACE=${KEYSPACE:-10000} PROTO=${PROTO:-binary}
command -v memcached >/dev/null || { echo "need memcached: apt-get install -y memcached" >&2; exit 1; }
# KURA=path/to/kura compares another build (the load generator is always this one's).
cargo build --release -q -p kura
BENCH="$PWD/target/release/kura"
KURA=${KURA:-$BENCH}
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

series() { # NAME: start it alone, RUNS runs, stop it
	local name=$1 port db="$WORK/o.kh"
	port=$(free_port)
	case $name in
	memcached) memcached -u root -l 127.0.0.1 -p "$port" -t "$THREADS" -U 0 -m 2048 -c 4096 & ;;
	kura-kh) "$KURA" serve "$db" --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	esac
	PID=$!
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
	for run in $(seq "$RUNS"); do
		line=$("$BENCH" bench --port "$port" --protocol "$PROTO" --connections "$CONNS" \
			--threads "$THREADS" --pipeline "$PIPELINE" --ratio 0:1 --duration "$SECS" --preload \
			--key-size 100 --value-size 400 --keyspace "$KEYSPACE" | grep '^RESULT' || echo "RESULT failed")
		ops=$(sed -n 's/.* ops_per_sec=\([0-9]*\).*/\1/p' <<<"$line")
		p99=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$line")
		p999=$(sed -n 's/.* p999_us=\([0-9]*\).*/\1/p' <<<"$line")
		size=-
		[ -d "$db" ] && size=$(du -sm "$db" | cut -f1)
		echo "$name $run ${ops:-0} ${p99:-0} ${p999:-0} $size"
	done
	kill "$PID"
	wait "$PID" 2>/dev/null || true
	PID=
	rm -rf "$db"
}

echo "# server run ops/s p99_us p999_us db_MB"
for rep in $(seq "$REPS"); do
	if [ $((rep % 2)) = 1 ]; then series memcached; series kura-kh; else series kura-kh; series memcached; fi
done | tee "$WORK/raw"
echo
echo "medians over every run: server ops/s p99_us"
MEDIAN='{a[NR]=$1} END{if (NR % 2) print a[(NR+1)/2]; else print int((a[NR/2]+a[NR/2+1])/2)}'
for s in memcached kura-kh; do
	ops=$(awk -v s=$s '$1==s{print $3}' "$WORK/raw" | sort -n | awk "$MEDIAN")
	p99=$(awk -v s=$s '$1==s{print $4}' "$WORK/raw" | sort -n | awk "$MEDIAN")
	echo "$s $ops $p99"
done
