#!/usr/bin/env bash
# Replication figures, REPS (default 3) runs of each, medians (docs/benchmarks/replication.md, "Update log
# and replication"). STEPS picks them (default "lag catchup bootstrap"):
#   lag       a `.kh` master with --ulog and a `.kh` replica. First the master's set rate with
#             the replica following (`kura bench`, memcached text, CONNS connections, 100-byte
#             keys, 400-byte values, 10,000 keys, 5 s); then half that rate, paced, for LAG_SECS
#             (20) s, while a probe key is set on the master every 10 ms and polled on the
#             replica every 0.5 ms: lag = master's acknowledgement -> first read on the replica
#             (bench/examples/repl_lag.rs).
#   catchup   the replica stopped while the master takes CATCHUP_N (1,000,000) single sets
#             (`kura bench --requests`, 16-byte keys, 100-byte values, distinct keys: one log
#             record each), then started: seconds until its position reaches the master's
#             newest record.
#   bootstrap a `.kh` master of BOOT_N (10,000,000) records (11-byte keys, 100-byte values,
#             loaded offline with `kura db import`), then a new `.kh` replica started while a
#             writer loads the master (`kura bench` sets in 3 s windows): seconds until the
#             snapshot is loaded and until the replica has caught up with the writes made
#             meanwhile, and the master's set rate in those windows against 3 windows before.
#             Needs about BOOT_N * 450 bytes of disk (checked first).
# Servers listen on 127.0.0.1 only and are stopped by their pids; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} STEPS=${STEPS:-lag catchup bootstrap} THREADS=${THREADS:-2} CONNS=${CONNS:-128}
LAG_SECS=${LAG_SECS:-20} CATCHUP_N=${CATCHUP_N:-1000000} BOOT_N=${BOOT_N:-10000000}
cargo build --release -q -p kura
cargo build --release -q -p kura-bench --example repl_lag
KURA="$PWD/target/release/kura"
LAG="$PWD/target/release/examples/repl_lag"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-repl.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
stat_of() { "$KURA" remote inform --port "$1" 2>/dev/null | sed -n "s/^$2: //p" || true; }
wait_stat() { # PORT FIELD VALUE SECONDS
	for _ in $(seq $(($4 * 20))); do [ "$(stat_of "$1" "$2")" = "$3" ] && return; sleep 0.05; done
	echo "port $1: $2 never became $3" >&2; exit 1
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : "-") }'; }
load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; }
echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores"

if [[ " $STEPS " == *" lag "* ]]; then
	: >"$WORK/lag"
	for rep in $(seq "$REPS"); do
		mp=$(free_port) rp=$(free_port)
		"$KURA" serve "$WORK/lm$rep.kh" --port "$mp" --threads "$THREADS" --sid 1 --ulog "$WORK/lmlog$rep" 2>/dev/null &
		m=$!; PIDS+=($m); wait_port "$mp"
		"$KURA" serve "$WORK/lr$rep.kh" --port "$rp" --threads "$THREADS" --sid 2 --master "127.0.0.1:$mp" 2>/dev/null &
		r=$!; PIDS+=($r); wait_port "$rp"
		wait_stat "$rp" master_connected true 20
		max=$(timeout 60 "$KURA" bench --port "$mp" --protocol text --ratio 0:1 --connections "$CONNS" \
			--threads "$THREADS" --duration 5 --key-size 100 --value-size 400 --keyspace 10000 |
			grep '^RESULT' | field ops_per_sec)
		rate=$((max / 2))
		out=$(timeout $((LAG_SECS + 60)) "$LAG" lag --master "127.0.0.1:$mp" --replica "127.0.0.1:$rp" \
			--rate "$rate" --secs "$LAG_SECS" --conns 8 || true)
		echo "$out" | grep -v '^RESULT' >&2 || true
		line=$(grep '^RESULT' <<<"$out" || echo "RESULT failed")
		echo "$max $(field achieved <<<"$line") $(field lag_p50_ms <<<"$line") $(field lag_p99_ms <<<"$line") $(field lag_max_ms <<<"$line")" >>"$WORK/lag"
		echo "lag rep $rep: max set rate $max/s, paced at $rate/s: $line; $(load)"
		stop "$r"; stop "$m"; rm -rf "$WORK/lm$rep.kh" "$WORK/lmlog$rep" "$WORK/lr$rep.kh" "$WORK/lr$rep.kh.replica"
	done
	echo "lag, medians of $REPS: max $(cut -d' ' -f1 "$WORK/lag" | median)/s, achieved $(cut -d' ' -f2 "$WORK/lag" | median)/s, p50 $(cut -d' ' -f3 "$WORK/lag" | median) ms, p99 $(cut -d' ' -f4 "$WORK/lag" | median) ms, max $(cut -d' ' -f5 "$WORK/lag" | median) ms"
fi

if [[ " $STEPS " == *" catchup "* ]]; then
	: >"$WORK/catchup"
	for rep in $(seq "$REPS"); do
		mp=$(free_port) rp=$(free_port)
		"$KURA" serve "$WORK/cm$rep.kh" --port "$mp" --threads "$THREADS" --sid 1 --ulog "$WORK/cmlog$rep" --ulog-limit 0 2>/dev/null &
		m=$!; PIDS+=($m); wait_port "$mp"
		start_replica() { "$KURA" serve "$WORK/cr$rep.kh" --port "$rp" --threads "$THREADS" --sid 2 --master "127.0.0.1:$mp" 2>/dev/null & r=$!; PIDS+=($r); }
		start_replica; wait_port "$rp"; wait_stat "$rp" master_connected true 20
		stop "$r"
		timeout 300 "$KURA" bench --port "$mp" --protocol text --ratio 0:1 --requests "$CATCHUP_N" \
			--keyspace "$CATCHUP_N" --connections 16 --threads "$THREADS" --pipeline 16 \
			--key-size 16 --value-size 100 | grep '^RESULT' >&2
		last=$(stat_of "$mp" ulog_last_ts)
		t0=$(date +%s%N)
		start_replica
		line=$(timeout 400 "$LAG" wait-pos --replica "127.0.0.1:$rp" --ts "$last" --since-ns "$t0" --timeout 300 || echo "RESULT failed")
		s=$(field caught_up_s <<<" $line")
		echo "$s" >>"$WORK/catchup"
		echo "catch-up rep $rep: $CATCHUP_N single-record log records in $s s (records on the replica: $(stat_of "$rp" records)); $(load)"
		stop "$r"; stop "$m"; rm -rf "$WORK/cm$rep.kh" "$WORK/cmlog$rep" "$WORK/cr$rep.kh" "$WORK/cr$rep.kh.replica"
	done
	echo "catch-up of $CATCHUP_N records, median of $REPS: $(median <"$WORK/catchup") s"
fi

if [[ " $STEPS " == *" bootstrap "* ]]; then
	need=$((BOOT_N * 450 / 1024))
	avail=$(df -k --output=avail "$WORK" | tail -1)
	if ((avail < need)); then
		echo "bootstrap: needs about $((need / 1024)) MiB free in $WORK, $((avail / 1024)) MiB there: skipped" >&2
		exit 1
	fi
	python3 -c "
import sys
v = 'v' * 90
w = sys.stdout.write
for i in range($BOOT_N): w('k%010d\t%s%010d\n' % (i, v, i))
" >"$WORK/boot.tsv"
	t0=$(date +%s.%N)
	"$KURA" db import --create "$WORK/bm.kh" "$WORK/boot.tsv" >/dev/null
	echo "loaded $BOOT_N records offline in $(printf %.1f "$(echo "$(date +%s.%N) - $t0" | bc)") s: $(du -sh "$WORK/bm.kh" | cut -f1)"
	rm -f "$WORK/boot.tsv"
	mp=$(free_port)
	"$KURA" serve "$WORK/bm.kh" --port "$mp" --threads "$THREADS" --sid 1 --ulog "$WORK/bmlog" 2>/dev/null &
	m=$!; PIDS+=($m); wait_port "$mp"
	window() { timeout 30 "$KURA" bench --port "$mp" --protocol text --ratio 0:1 --connections 32 \
		--threads "$THREADS" --duration 3 --key-size 16 --value-size 100 --keyspace 100000 | grep '^RESULT' | field ops_per_sec; }
	: >"$WORK/base"; : >"$WORK/during"; : >"$WORK/boot"
	for _ in 1 2 3; do window >>"$WORK/base" || true; done
	echo "master set rate without a bootstrap: $(tr '\n' ' ' <"$WORK/base")"
	for rep in $(seq "$REPS"); do
		rp=$(free_port)
		t0=$(date +%s%N)
		"$KURA" serve "$WORK/br$rep.kh" --port "$rp" --threads "$THREADS" --sid $((rep + 1)) --master "127.0.0.1:$mp" 2>/dev/null &
		r=$!; PIDS+=($r)
		"$LAG" wait-boot --replica "127.0.0.1:$rp" --master "127.0.0.1:$mp" --since-ns "$t0" --timeout 600 >"$WORK/w$rep" &
		w=$!
		rates=""
		while kill -0 "$w" 2>/dev/null; do x=$(window || echo 0); rates="$rates $x"; echo "$x" >>"$WORK/during"; done
		wait "$w" || true
		line=$(grep '^RESULT' "$WORK/w$rep" || echo "RESULT failed")
		echo "$(field snapshot_s <<<" $line") $(field caught_up_s <<<" $line")" >>"$WORK/boot"
		echo "bootstrap rep $rep: $line; master set rate meanwhile:$rates; $(load)"
		stop "$r"; rm -rf "$WORK/br$rep.kh" "$WORK/br$rep.kh.replica"
		# Forget it, so that its position holds back nothing.
		"$KURA" remote --port "$mp" forget $((rep + 1)) >/dev/null || true
	done
	echo "bootstrap of $BOOT_N records, medians of $REPS: snapshot loaded $(cut -d' ' -f1 "$WORK/boot" | median) s, caught up $(cut -d' ' -f2 "$WORK/boot" | median) s; master sets/s: $(median <"$WORK/base") before, $(median <"$WORK/during") during"
	stop "$m"
fi
