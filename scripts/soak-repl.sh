#!/usr/bin/env bash
# Replication soak (not part of scripts/test.sh): a `.kh` master holding N records (default
# 1,000,000, loaded offline with `kura db import`) takes a writer's sets without pause
# (`kura bench`, restarted whenever a kill cuts it off); a new `.kh` replica joins it and
# bootstraps from a snapshot meanwhile; then ROUNDS (default 5) times, after 1-4 s, SIGKILL of
# the master, the replica or both at once (chosen by SEED), each restarted at once. Finally
# the writer stops and the script reports whether the replica converged: its position reaches
# the master's newest record, and hot copies of both (`kura remote copy`) export the same
# records. Exit status 0 when it converged, 1 when not, 2 on a setup failure.
# Bounded: every wait has a limit and the whole run stops after LIMIT (default 900) seconds.
# Servers listen on 127.0.0.1 only and are stopped by their pids.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000} ROUNDS=${ROUNDS:-5} THREADS=${THREADS:-2} SEED=${SEED:-$RANDOM} LIMIT=${LIMIT:-900}
RANDOM=$SEED
cargo build --release -q -p kura
KURA="$PWD/target/release/kura"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/soak-repl.XXXXXX")
M="" R="" W=""
cleanup() {
	touch "$WORK/stop"
	for p in $M $R $W; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
say() { echo "[$(printf '%4d' "$SECONDS") s] $*"; }
bail() { say "$*"; exit 2; }
deadline() { ((SECONDS < LIMIT)) || bail "over the time limit ($LIMIT s)"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.05; done; bail "port $1 never opened"; }
stat_of() { "$KURA" remote inform --port "$1" 2>/dev/null | sed -n "s/^$2: //p" || true; }
mp=$(free_port) rp=$(free_port)
mkdir -p "$WORK/bk"
start_master() {
	"$KURA" serve "$WORK/m.kh" --port "$mp" --threads "$THREADS" --sid 1 --ulog "$WORK/mlog" \
		--backup-dir "$WORK/bk" --log "$WORK/m.log" &
	M=$!
	wait_port "$mp"
}
start_replica() {
	"$KURA" serve "$WORK/r.kh" --port "$rp" --threads "$THREADS" --sid 2 --master "127.0.0.1:$mp" \
		--backup-dir "$WORK/bk" --log "$WORK/r.log" &
	R=$!
	wait_port "$rp"
}
kill9() { kill -KILL "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

say "seed $SEED, $N records, $ROUNDS rounds; $(date -u +%FT%TZ) $(git rev-parse --short HEAD)"
python3 -c "
import sys
w = sys.stdout.write
for i in range($N): w('k%010d\tvalue-%010d-0123456789012345678901234567890123456789012345678901234567890123456789\n' % (i, i))
" >"$WORK/in.tsv"
"$KURA" db import --create "$WORK/m.kh" "$WORK/in.tsv" >/dev/null
rm -f "$WORK/in.tsv"
start_master
say "master on $mp holds $(stat_of "$mp" records) records"

# The writer: sets over 8 connections, 2 s runs, until the stop file appears.
(
	while [ ! -e "$WORK/stop" ]; do
		timeout 30 "$KURA" bench --port "$mp" --protocol text --ratio 0:1 --duration 2 --connections 8 \
			--threads 1 --key-size 16 --value-size 100 --keyspace 200000 2>/dev/null |
			sed -n 's/.* ops_per_sec=\([0-9]*\).*/\1/p' >>"$WORK/rates" || sleep 0.2
	done
) &
W=$!
sleep 1

# The replica joins under load.
start_replica
for _ in $(seq 1200); do
	[ "$(stat_of "$rp" repl_bootstraps)" = 1 ] && break
	deadline
	sleep 0.1
done
say "replica on $rp bootstrapped: $(stat_of "$rp" records) records, delay $(stat_of "$rp" delay) s"

for round in $(seq "$ROUNDS"); do
	deadline
	sleep $((1 + RANDOM % 4))
	case $((RANDOM % 3)) in
	0) victim=master ;;
	1) victim=replica ;;
	*) victim="master and the replica" ;;
	esac
	case $victim in
	master) kill9 "$M"; start_master ;;
	replica) kill9 "$R"; start_replica ;;
	both | "master and the replica")
		kill -KILL "$M" "$R" 2>/dev/null || true
		wait "$M" "$R" 2>/dev/null || true
		start_master; start_replica ;;
	esac
	say "round $round: SIGKILL of the $victim; restarted"
done

touch "$WORK/stop"
wait "$W" 2>/dev/null || true
W=""
say "writer stopped: $(wc -l <"$WORK/rates") runs, median $(sort -n "$WORK/rates" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }') sets/s"

last=$(stat_of "$mp" ulog_last_ts)
t0=$SECONDS
converged=0
for _ in $(seq 1200); do
	rts=$(stat_of "$rp" rts)
	[ -n "$rts" ] && [ "$rts" -ge "$last" ] && { converged=1; break; }
	((SECONDS < LIMIT)) || break
	sleep 0.1
done
if ((converged == 0)); then
	say "NOT CONVERGED: replica position ${rts:-?}, master's newest record $last"
	tail -5 "$WORK/r.log"
	exit 1
fi
say "replica at the master's newest record $((SECONDS - t0)) s after the writer stopped"
"$KURA" remote --port "$mp" copy m-copy.kh >/dev/null
"$KURA" remote --port "$rp" copy r-copy.kh >/dev/null
"$KURA" db export "$WORK/bk/m-copy.kh" | sort >"$WORK/m.tsv"
"$KURA" db export "$WORK/bk/r-copy.kh" | sort >"$WORK/r.tsv"
if cmp -s "$WORK/m.tsv" "$WORK/r.tsv"; then
	say "CONVERGED: $(wc -l <"$WORK/m.tsv") records on both; replica bootstraps since its last start: $(stat_of "$rp" repl_bootstraps)"
else
	say "NOT CONVERGED: master $(wc -l <"$WORK/m.tsv") records, replica $(wc -l <"$WORK/r.tsv"); first differences:"
	diff "$WORK/m.tsv" "$WORK/r.tsv" | head -5 || true
	exit 1
fi
