#!/usr/bin/env bash
# Table database benchmark: Kura's `PATH.kt` against Tokyo Cabinet's `.tct` in one run.
#
# Part `engine`: `tcttest write` / `tcttest read` against `table-bench write` / `read` (bench/src/bin/
# table_bench.rs: the same records as tcttest's, ids 1..N, primary key `%d`, columns str, num,
# type and, in most records, flag and text), without indexes and with tcttest's five
# (`-ip -is -in -it -if`: the primary key decimal, str lexical, num decimal, type decimal, flag
# token). Each phase its own process; time is each tool's own clock, open to close; peak RSS from
# /usr/bin/time; size is `du -sb` of the `.tct` plus its `.idx.*` files, and of the `.kt`.
#
# Part `query`: one database of each with all six indexes (the five and `-ix`, text q-gram), then
# per query shape `tctmgr search -bt QREPS` against `table-bench search -r QREPS` (each one
# process, the database opened once, the time per query):
#   eq      str STREQ N/2              (lexical index)
#   range   num NUMBT "1000 2000"      (decimal index)
#   fts     text FTSPH "3,5"           (q-gram index)
#   order   order by num NUMDESC, limit 10, no condition
#   strinc  str STRINC 12345           (no index answers it: every record is read)
#
# Part `seed`: the write-up's workload (issue 32; table-bench seed) through `kura serve` over
# the Tyrant protocol: SEED_N records keyed by an e-mail address or a 9-digit id, a sendDates
# column (token index) and a count column; then SEED_M updates (a get, then a put with a date
# added); then a get of every key; then a search by date (over the wire when the server has
# `misc search`, else through the engine after the server stops). Pipelined (SEED_PIPELINE
# requests in flight on one connection) and unpipelined (one round trip a request, on SEED_N1
# records), and the same data in a `.kh` hash for the size. Peak RSS of the server from
# /proc/PID/status (VmHWM), size `du -sb`.
#
# Usage: scripts/bench-table.sh                   (from anywhere in the repository)
#        N=100000 PARTS="engine query" scripts/bench-table.sh
#
# Environment:
#   REPS=3             repetitions (medians are shown; ratios are of the medians of one run)
#   N=1000000          records of parts engine and query
#   QREPS=10           queries per search process
#   PARTS="engine query seed"
#   SEED_N=3760000 SEED_M=(SEED_N*158/376) SEED_N1=(SEED_N/10) SEED_PIPELINE=256
#   RUN_TIMEOUT=3600   seconds any single command may take
#   BENCH_TMPDIR=...   where the databases go (default $TMPDIR or /tmp)
#   RAW=file           also keep every single measurement there
#   KURA_BIN=.. TABLE_BENCH_BIN=..   use these binaries instead of building them

set -euo pipefail

REPS=${REPS:-3}
N=${N:-1000000}
QREPS=${QREPS:-10}
PARTS=${PARTS:-engine query seed}
SEED_N=${SEED_N:-3760000}
SEED_M=${SEED_M:-$((SEED_N * 158 / 376))}
SEED_N1=${SEED_N1:-$((SEED_N / 10))}
SEED_PIPELINE=${SEED_PIPELINE:-256}
RUN_TIMEOUT=${RUN_TIMEOUT:-3600}
BENCH_TMPDIR=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}

die() {
	echo "bench-table: $*" >&2
	exit 1
}
has_part() { [[ " $PARTS " == *" $1 "* ]]; }

for v in REPS N QREPS SEED_N SEED_N1 SEED_PIPELINE RUN_TIMEOUT; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ $SEED_M =~ ^[0-9]+$ ]] || die "SEED_M must be an integer"
if ! command -v tcttest >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
	echo "bench-table: installing tokyocabinet-bin (tcttest missing)..." >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq tokyocabinet-bin >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq tokyocabinet-bin >/dev/null; }
fi
command -v tcttest >/dev/null 2>&1 && command -v tctmgr >/dev/null 2>&1 ||
	die "tcttest/tctmgr are missing; install them with: sudo apt-get install -y tokyocabinet-bin"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing: sudo apt-get install -y time"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ -n ${TABLE_BENCH_BIN:-} ]]; then
	BIN=$TABLE_BENCH_BIN
else
	echo "building table-bench (release)..." >&2
	cargo build --release -q -p kura-bench --bin table-bench
	BIN=$TARGET/release/table-bench
fi
if ! has_part seed; then
	KURA=
elif [[ -n ${KURA_BIN:-} ]]; then
	KURA=$KURA_BIN
else
	echo "building kura (release)..." >&2
	cargo build --release -q -p kura
	KURA=$TARGET/release/kura
fi

WORK=$(mktemp -d "$BENCH_TMPDIR/kura-bench-table.XXXXXX")
SERVER=
cleanup() {
	[[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
DATA=$WORK/results.tsv
: >"$DATA"

rec() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$DATA"; }
# run_cmd OUTVAR CMD...: run under /usr/bin/time (peak RSS into RSS, KiB), keep the output.
run_cmd() {
	local __var=$1 __out
	shift
	if ! __out=$(timeout "$RUN_TIMEOUT" /usr/bin/time -f '%M' -o "$WORK/rss" "$@" 2>&1); then
		echo "bench-table: FAILED (or over ${RUN_TIMEOUT}s): $*" >&2
		tail -n 20 <<<"$__out" >&2
		exit 1
	fi
	RSS=$(tail -n 1 "$WORK/rss")
	printf -v "$__var" '%s' "$__out"
}
size_of() { du -scb "$@" | tail -n 1 | cut -f1; }
kfield() { grep -m1 "^RESULT op=$2 " <<<"$1" | tr ' ' '\n' | sed -n "s/^$3=//p"; }
tc_time() { awk '/^time:/ { t = $2 } END { print t }' <<<"$1"; }
tc_ok() { grep -qx ok <<<"$1" || die "Tokyo Cabinet reported an error"; }
# index flags: tcttest's and table-bench's
TC_FIVE=(-ip -is -in -it -if)
TC_SIX=(-ip -is -in -it -if -ix)

# run_tc TAG FLAGS...: write then read a .tct.
run_tc() {
	local tag=$1 dir out
	shift
	dir=$(mktemp -d "$WORK/tc.XXXXXX")
	run_cmd out tcttest write "$@" "$dir/casket.tct" "$N"
	tc_ok "$out"
	echo "    TC   $tag: write $(tc_time "$out") s" >&2
	rec tc "write$tag" "$(tc_time "$out")"
	rec tc "wrss$tag" "$RSS"
	rec tc "size$tag" "$(size_of "$dir"/casket.tct*)"
	run_cmd out tcttest read "$dir/casket.tct"
	tc_ok "$out"
	rec tc "read$tag" "$(tc_time "$out")"
	rec tc "rrss$tag" "$RSS"
	rm -rf "$dir"
}
run_kura() {
	local tag=$1 idx=$2 dir out
	dir=$(mktemp -d "$WORK/kura.XXXXXX")
	run_cmd out "$BIN" write -n "$N" ${idx:+-i "$idx"} "$dir/casket.kt"
	echo "    Kura $tag: write $(kfield "$out" write seconds) s" >&2
	rec kura "write$tag" "$(kfield "$out" write seconds)"
	rec kura "wrss$tag" "$RSS"
	rec kura "size$tag" "$(size_of "$dir/casket.kt")"
	run_cmd out "$BIN" read "$dir/casket.kt"
	rec kura "read$tag" "$(kfield "$out" read seconds)"
	rec kura "rrss$tag" "$RSS"
	rm -rf "$dir"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "table benchmark: N=$N, $REPS repetitions, parts: $PARTS, under $WORK ($(nproc) cores," \
	"load $LOAD0)" >&2

if has_part engine; then
	for ((rep = 1; rep <= REPS; rep++)); do
		echo "engine rep $rep/$REPS:" >&2
		if ((rep % 2)); then
			run_tc 0
			run_kura 0 ""
			run_tc 5 "${TC_FIVE[@]}"
			run_kura 5 psntf
		else
			run_kura 0 ""
			run_tc 0
			run_kura 5 psntf
			run_tc 5 "${TC_FIVE[@]}"
		fi
	done
fi

# tc_search DB SHAPE: tctmgr search's arguments for a shape of table-bench's, into ARGS.
tc_search() {
	local db=$1
	case $2 in
	eq) ARGS=("$db" str STREQ $((N / 2))) ;;
	range) ARGS=("$db" num NUMBT "1000 2000") ;;
	fts) ARGS=("$db" text FTSPH 3,5) ;;
	order) ARGS=(-ord num NUMDESC -m 10 "$db") ;;
	strinc) ARGS=("$db" str STRINC 12345) ;;
	esac
}
SHAPES="eq range fts order strinc"
if has_part query; then
	echo "query databases: $N records, six indexes each" >&2
	QD=$WORK/query
	mkdir -p "$QD"
	run_cmd out tcttest write "${TC_SIX[@]}" "$QD/q.tct" "$N"
	tc_ok "$out"
	rec tc write6 "$(tc_time "$out")"
	rec tc size6 "$(size_of "$QD"/q.tct*)"
	run_cmd out "$BIN" write -n "$N" -i psntfx "$QD/q.kt"
	rec kura write6 "$(kfield "$out" write seconds)"
	rec kura size6 "$(size_of "$QD/q.kt")"
	for shape in $SHAPES; do
		tc_search "$QD/q.tct" "$shape"
		rec tc "matches_$shape" "$(tctmgr search "${ARGS[@]}" | wc -l)"
	done
	for ((rep = 1; rep <= REPS; rep++)); do
		echo "query rep $rep/$REPS" >&2
		for shape in $SHAPES; do
			tc_search "$QD/q.tct" "$shape"
			run_cmd out tctmgr search -bt "$QREPS" "${ARGS[@]}"
			t=$(awk '/^total:/ { print $2 }' <<<"$out")
			rec tc "q_$shape" "$(echo "$t / $QREPS" | bc -l)"
			run_cmd out "$BIN" search -r "$QREPS" "$QD/q.kt" "$shape"
			rec kura "q_$shape" "$(kfield "$out" search seconds)"
			rec kura "matches_$shape" "$(kfield "$out" search matches)"
		done
	done
	rm -rf "$QD"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# seed_run TAG DBNAME RECORDS UPDATES PIPELINE [-x]: a fresh server, the workload, its peak RSS,
# the size; the search by date through the engine when the server has none.
seed_run() {
	local tag=$1 db=$2 n=$3 m=$4 p=$5 port out op
	shift 5
	port=$(free_port)
	"$KURA" serve "$db" --port "$port" 2>>"$WORK/serve.err" &
	SERVER=$!
	for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
	out=$(timeout "$RUN_TIMEOUT" "$BIN" seed -n "$n" -m "$m" -p "$p" "$@" "$port") ||
		{ echo "$out" >&2; die "seed run $tag failed"; }
	rec kura "seed_rss$tag" "$(awk '/^VmHWM:/ { print $2 }' "/proc/$SERVER/status")"
	kill "$SERVER"
	wait "$SERVER" 2>/dev/null || true
	SERVER=
	for op in load update lookup; do
		rec kura "seed_$op$tag" "$(kfield "$out" "$op" seconds)"
	done
	rec kura "seed_size$tag" "$(size_of "$db")"
	echo "    seed $tag: $(grep -o 'op=[a-z]* .*seconds=[0-9.]*' <<<"$out" | tr '\n' ' ')" >&2
	if [[ $* != *-x* ]]; then
		if [[ $(kfield "$out" query matches) == -1 ]]; then
			out=$("$BIN" search -r 3 "$db" date)
			rec kura "seed_query_where$tag" engine
			rec kura "seed_query$tag" "$(kfield "$out" search seconds)"
			rec kura "seed_matches$tag" "$(kfield "$out" search matches)"
		else
			rec kura "seed_query_where$tag" wire
			rec kura "seed_query$tag" "$(kfield "$out" query seconds)"
			rec kura "seed_matches$tag" "$(kfield "$out" query matches)"
		fi
	fi
	rm -rf "$db"
}
if has_part seed; then
	for ((rep = 1; rep <= REPS; rep++)); do
		echo "seed rep $rep/$REPS: $SEED_N records, $SEED_M updates" >&2
		seed_run P "$WORK/seed.kt" "$SEED_N" "$SEED_M" "$SEED_PIPELINE"
		seed_run H "$WORK/seed.kh" "$SEED_N" "$SEED_M" "$SEED_PIPELINE" -x
		seed_run 1 "$WORK/seed1.kt" "$SEED_N1" $((SEED_N1 * 158 / 376)) 1
	done
fi

[[ -n ${RAW:-} ]] && cp "$DATA" "$RAW" && echo "raw measurements: $RAW" >&2
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

awk -F '\t' -v reps="$REPS" -v n="$N" -v qreps="$QREPS" -v parts="$PARTS" -v sn="$SEED_N" \
	-v sm="$SEED_M" -v sn1="$SEED_N1" -v sp="$SEED_PIPELINE" -v load0="$LOAD0" -v load1="$LOAD1" '
function median(key,    c, i, j, a, tmp) {
	if (!(key in vals)) return ""
	c = split(vals[key], a, " ")
	for (i = 2; i <= c; i++) {            # insertion sort (mawk has no asort)
		tmp = a[i]
		for (j = i - 1; j >= 1 && a[j] + 0 > tmp + 0; j--) a[j + 1] = a[j]
		a[j + 1] = tmp
	}
	if (a[1] !~ /^[0-9.]+$/) return a[1]
	if (c % 2) return a[(c + 1) / 2] + 0
	return (a[c / 2] + a[c / 2 + 1]) / 2
}
function sec(v) { return v == "" ? "-" : sprintf("%.3f s", v) }
function ms(v) { return v == "" ? "-" : sprintf("%.3f ms", v * 1000) }
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "-" : sprintf("%.2f", a / b) }
function mb(v) { return v == "" ? "-" : sprintf("%.1f MB", v / 1e6) }
function mib(v) { return v == "" ? "-" : sprintf("%.0f MB", v / 1024) }
function has(p) { return index(" " parts " ", " " p " ") > 0 }
{ k = $1 SUBSEP $2; vals[k] = (k in vals) ? vals[k] " " $3 : $3 }
END {
	printf "\nLoad average: %s at the start, %s at the end.\n", load0, load1
	if (has("engine")) {
		printf "\nTable databases: tcttest'"'"'s records, N = %d, one thread, default tuning; median of %d runs,\n", n, reps
		printf "each phase its own process. Speedup = TC time / Kura time (target >= 1.5); size and RSS: Kura / TC.\n\n"
		printf "| %-26s | %12s | %12s | %8s |\n", "", "TC (.tct)", "Kura (.kt)", "ratio"
		printf "|%s|%s|%s|%s|\n", "----------------------------", "-------------:", "-------------:", "---------:"
		split("0 5", T, " "); L[0] = "no index"; L[5] = "5 indexes"
		for (t = 1; t <= 2; t++) {
			g = T[t]
			tc = median("tc" SUBSEP "write" g); ku = median("kura" SUBSEP "write" g)
			printf "| %-26s | %12s | %12s | %8s |\n", "write, " L[g], sec(tc), sec(ku), ratio(tc, ku)
			tc = median("tc" SUBSEP "read" g); ku = median("kura" SUBSEP "read" g)
			printf "| %-26s | %12s | %12s | %8s |\n", "read, " L[g], sec(tc), sec(ku), ratio(tc, ku)
			tc = median("tc" SUBSEP "size" g); ku = median("kura" SUBSEP "size" g)
			printf "| %-26s | %12s | %12s | %8s |\n", "size, " L[g], mb(tc), mb(ku), ratio(ku, tc)
			tc = median("tc" SUBSEP "wrss" g); ku = median("kura" SUBSEP "wrss" g)
			printf "| %-26s | %12s | %12s | %8s |\n", "write peak RSS, " L[g], mib(tc), mib(ku), ratio(ku, tc)
			tc = median("tc" SUBSEP "rrss" g); ku = median("kura" SUBSEP "rrss" g)
			printf "| %-26s | %12s | %12s | %8s |\n", "read peak RSS, " L[g], mib(tc), mib(ku), ratio(ku, tc)
		}
	}
	if (has("query")) {
		printf "\nQueries on N = %d records with six indexes (tcttest -ip -is -in -it -if -ix / table-bench -i psntfx;\n", n
		printf "writing them: TC %s, Kura %s; size TC %s, Kura %s). Time per query, median of %d runs of %d queries\n", sec(median("tc" SUBSEP "write6")), sec(median("kura" SUBSEP "write6")), mb(median("tc" SUBSEP "size6")), mb(median("kura" SUBSEP "size6")), reps, qreps
		printf "in one process (tctmgr search -bt, table-bench search -r). Speedup = TC / Kura.\n\n"
		printf "| %-34s | %8s | %12s | %12s | %8s |\n", "query", "matches", "tctmgr", "Kura", "speedup"
		printf "|%s|%s|%s|%s|%s|\n", "------------------------------------", "---------:", "-------------:", "-------------:", "---------:"
		split("eq range fts order strinc", S, " ")
		Q["eq"] = "str STREQ N/2 (lexical index)"; Q["range"] = "num NUMBT 1000 2000 (decimal)"
		Q["fts"] = "text FTSPH 3,5 (q-gram)"; Q["order"] = "order num NUMDESC, limit 10"
		Q["strinc"] = "str STRINC 12345 (no index)"
		for (s = 1; s <= 5; s++) {
			tc = median("tc" SUBSEP "q_" S[s]); ku = median("kura" SUBSEP "q_" S[s])
			m = median("tc" SUBSEP "matches_" S[s]) "/" median("kura" SUBSEP "matches_" S[s])
			printf "| %-34s | %8s | %12s | %12s | %8s |\n", Q[S[s]], m, ms(tc), ms(ku), ratio(tc, ku)
		}
		printf "\n(matches: TC/Kura; the records are drawn alike, not identically, so counts differ a little.)\n"
	}
	if (has("seed")) {
		printf "\nThe write-up'"'"'s workload through kura serve over the Tyrant protocol, one connection; median of %d runs.\n", reps
		printf "Pipelined (%d requests in flight): %d records, %d updates (get + put each).\n\n", sp, sn, sm
		printf "| %-34s | %12s | %15s |\n", "phase", ".kt", ".kh (same data)"
		printf "|%s|%s|%s|\n", "------------------------------------", "-------------:", "----------------:"
		split("load update lookup", P, " ")
		tot = 0; toth = 0
		for (p = 1; p <= 3; p++) {
			ku = median("kura" SUBSEP "seed_" P[p] "P"); kh = median("kura" SUBSEP "seed_" P[p] "H")
			tot += ku; toth += kh
			printf "| %-34s | %12s | %15s |\n", P[p], sec(ku), sec(kh)
		}
		printf "| %-34s | %12s | %15s |\n", "load + update + lookup", sec(tot), sec(toth)
		printf "| %-34s | %12s | %15s |\n", "query by date (" median("kura" SUBSEP "seed_query_whereP") ", " median("kura" SUBSEP "seed_matchesP") " found)", ms(median("kura" SUBSEP "seed_queryP")), "-"
		printf "| %-34s | %12s | %15s |\n", "server peak RSS", mib(median("kura" SUBSEP "seed_rssP")), mib(median("kura" SUBSEP "seed_rssH"))
		printf "| %-34s | %12s | %15s |\n", "size", mb(median("kura" SUBSEP "seed_sizeP")), mb(median("kura" SUBSEP "seed_sizeH"))
		tot1 = 0
		for (p = 1; p <= 3; p++) tot1 += median("kura" SUBSEP "seed_" P[p] "1")
		printf "\nUnpipelined (one round trip a request), %d records: load %s, update %s, lookup %s; the three %s,\n", sn1, sec(median("kura" SUBSEP "seed_load1")), sec(median("kura" SUBSEP "seed_update1")), sec(median("kura" SUBSEP "seed_lookup1")), sec(tot1)
		printf "%.0f s scaled to 3.76M records.\n", tot1 * 3760000 / sn1
	}
}' "$DATA"
