#!/usr/bin/env bash
# Fixed-length database benchmark: Kura's `PATH.kf` against Tokyo Cabinet's `.tcf`
# (`tcftest write` / `tcftest read`) on the same workload: RECORDS records with 8-byte `%08d`
# keys (ids 1..RECORDS) and values equal to the keys, in id order, one thread, default tuning
# for both (width 255, limsiz 256 MiB: ids up to 1,048,575). Each phase runs in its own
# process: write (open, store every record, close), then read (open, get and verify every
# record, close).
#
# A second part compares the command-line tools, `kura db` against Tokyo Cabinet's `tcfmgr`, on
# TOOL_RECORDS records (ids shuffled, 8-byte values `%08d` of the id, width 8 for both): the
# file size after the import, `import` (`tcfmgr importtsv`), `export` (`tcfmgr list -pv`), a
# range of 100,000 ids (`kura db list --values --from LO --through HI`, `tcfmgr list -pv -rb LO
# HI`; the whole database when it holds fewer), and `get` of one id in a fresh process (its
# wall clock, the median of GETS runs, and its peak RSS from /usr/bin/time). Import, export and
# range also report their CPU time (user + system, from the shell's `times`).
#
# Usage: scripts/bench-fixed.sh            (from anywhere in the repository)
#        PARTS=tools scripts/bench-fixed.sh   (the tool comparison only)
#
# Environment:
#   REPS=3            repetitions; the table shows the median of each figure
#   RECORDS=1000000   records per run (at most 1048575, the default id limit of both)
#   RUN_TIMEOUT=600   seconds any single command may take before the script gives up
#   BENCH_TMPDIR=...  where the databases go (default $TMPDIR or /tmp); each run uses a fresh
#                     directory there, removed after the run
#   RAW=file          also keep every single measurement there (tab-separated)
#   KURA_BENCH_BIN=.. use this kura-bench binary instead of building one
#   PARTS="engine tools"  which parts to run
#   TOOL_RECORDS="1000 1000000"  database sizes of the tool comparison
#   GETS=21           fresh-process gets per database (the median is shown)
#   KURA_BIN=...      use this kura binary instead of building one
#
# Timing: each tool's own in-process wall clock, parsed from its output, open to close.
#   tcftest write / read   its "time:" line
#   kura-bench write / read   its RESULT "seconds" (write includes an explicit sync; close
#                             syncs and writes a checkpoint)
# File sizes are `du -sb` of the database right after the write phase (a file for Tokyo
# Cabinet, a directory of segments and a checkpoint for Kura).
#
# The two tools alternate which goes first in each repetition, so that slow drifts of a
# shared machine do not always hit the same one.

set -euo pipefail

REPS=${REPS:-3}
RECORDS=${RECORDS:-1000000}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
BENCH_TMPDIR=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}

die() {
	echo "bench-fixed: $*" >&2
	exit 1
}

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer"
[[ $RECORDS =~ ^[1-9][0-9]*$ ]] && ((RECORDS <= 1048575)) ||
	die "RECORDS must be a positive integer up to 1048575 (the default id limit)"
[[ $RUN_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "RUN_TIMEOUT must be a positive integer"
PARTS=${PARTS:-engine tools}
TOOL_RECORDS=${TOOL_RECORDS:-1000 1000000}
GETS=${GETS:-21}
has_part() { [[ " $PARTS " == *" $1 "* ]]; }

if ! command -v tcftest >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
	echo "bench-fixed: installing tokyocabinet-bin (tcftest missing)..." >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq tokyocabinet-bin >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq tokyocabinet-bin >/dev/null; }
fi
command -v tcftest >/dev/null 2>&1 ||
	die "tcftest is missing; install it with: sudo apt-get install -y tokyocabinet-bin"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if ! has_part engine; then
	BIN=
elif [[ -n ${KURA_BENCH_BIN:-} ]]; then
	BIN=$KURA_BENCH_BIN
else
	echo "building kura-bench (release)..." >&2
	cargo build --release -q -p kura-bench
	BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/kura-bench
fi
[[ -z $BIN || -x $BIN ]] || die "no $BIN after the build"
if ! has_part tools; then
	KURA=
elif [[ -n ${KURA_BIN:-} ]]; then
	KURA=$KURA_BIN
else
	echo "building kura (release)..." >&2
	cargo build --release -q -p kura
	KURA=${CARGO_TARGET_DIR:-$ROOT/target}/release/kura
fi
[[ -z $KURA || -x $KURA ]] || die "no $KURA after the build"
if has_part tools; then
	command -v tcfmgr >/dev/null 2>&1 || die "tcfmgr is missing: sudo apt-get install -y tokyocabinet-bin"
	[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing: sudo apt-get install -y time"
fi

WORK=$(mktemp -d "$BENCH_TMPDIR/kura-bench-fixed.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/results.tsv
: >"$DATA"

# rec TOOL METRIC VALUE
rec() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$DATA"; }

# run_cmd OUTVAR CMD...: run (at most RUN_TIMEOUT seconds), keep the combined output, fail
# loudly with its tail.
run_cmd() {
	local __var=$1 __out
	shift
	if ! __out=$(timeout "$RUN_TIMEOUT" "$@" 2>&1); then
		echo "bench-fixed: FAILED (or over ${RUN_TIMEOUT}s): $*" >&2
		tail -n 20 <<<"$__out" >&2
		exit 1
	fi
	printf -v "$__var" '%s' "$__out"
}

size_of() { du -sb "$1" | cut -f1; }
kfield() { grep -m1 "^RESULT op=$2 " <<<"$1" | tr ' ' '\n' | sed -n "s/^$3=//p"; }
tc_time() { awk '/^time:/ { t = $2 } END { print t }' <<<"$1"; }
tc_ok() { grep -qx ok <<<"$1" || die "Tokyo Cabinet reported an error"; }

run_tc() {
	local dir out tw tr sz n
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	run_cmd out tcftest write "$dir/casket.tcf" "$RECORDS"
	tc_ok "$out"
	tw=$(tc_time "$out")
	n=$(awk '/^record number:/ { n = $3 } END { print n }' <<<"$out")
	sz=$(size_of "$dir/casket.tcf")
	run_cmd out tcftest read "$dir/casket.tcf"
	tc_ok "$out"
	tr=$(tc_time "$out")
	rm -rf "$dir"
	rec tc write "$tw"
	rec tc read "$tr"
	rec tc size "$sz"
	echo "    TC    write ${tw}s read ${tr}s size $sz ($n records)" >&2
}

run_kura() {
	local dir out tw tr sz n
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	run_cmd out "$BIN" write -n "$RECORDS" "$dir/casket.kf"
	tw=$(kfield "$out" write seconds)
	n=$(kfield "$out" write count)
	sz=$(size_of "$dir/casket.kf")
	run_cmd out "$BIN" read -n "$RECORDS" "$dir/casket.kf"
	tr=$(kfield "$out" read seconds)
	rm -rf "$dir"
	rec kura write "$tw"
	rec kura read "$tr"
	rec kura size "$sz"
	echo "    Kura  write ${tw}s read ${tr}s size $sz (${n:-?} records)" >&2
}

if has_part engine; then
echo "fixed-length benchmark: $RECORDS records, $REPS repetitions, under $WORK" \
	"(a shared machine: $(nproc) cores)" >&2
for ((rep = 1; rep <= REPS; rep++)); do
	echo "rep $rep/$REPS:" >&2
	if ((rep % 2)); then
		run_tc
		run_kura
	else
		run_kura
		run_tc
	fi
done

[[ -n ${RAW:-} ]] && cp "$DATA" "$RAW" && echo "raw measurements: $RAW" >&2

awk -F '\t' -v reps="$REPS" -v records="$RECORDS" '
function median(key,    n, i, j, a, tmp) {
	if (!(key in vals)) return ""
	n = split(vals[key], a, " ")
	for (i = 2; i <= n; i++) {            # insertion sort (mawk has no asort)
		tmp = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > tmp; j--) a[j + 1] = a[j]
		a[j + 1] = tmp
	}
	if (n % 2) return a[(n + 1) / 2] + 0
	return (a[n / 2] + a[n / 2 + 1]) / 2
}
function sec(v) { return v == "" ? "-" : sprintf("%.3f", v) }
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "-" : sprintf("%.2f", a / b) }
function mb(v) { return v == "" ? "-" : sprintf("%.1f MB", v / 1e6) }
{ k = $1 SUBSEP $2; vals[k] = (k in vals) ? vals[k] " " $3 : $3 }
END {
	printf "\nFixed-length databases: %d records (8-byte ids and values), in id order, 1 thread, default tuning;\n", records
	printf "median of %d runs, seconds, open to close, each phase its own process (lower is better).\n", reps
	printf "TC = tcftest write, read (.tcf); Kura = kura-bench write, read (.kf). Speedup = TC time / Kura time (target >= 1.5).\n\n"
	printf "| %-6s | %9s | %9s | %8s |\n", "phase", "TC", "Kura", "speedup"
	printf "|%s|%s|%s|%s|\n", "--------", "----------:", "----------:", "---------:"
	split("write read", P, " ")
	for (p = 1; p <= 2; p++) {
		tc = median("tc" SUBSEP P[p]); ku = median("kura" SUBSEP P[p])
		printf "| %-6s | %9s | %9s | %8s |\n", P[p], sec(tc), sec(ku), ratio(tc, ku)
	}
	tc = median("tc" SUBSEP "size"); ku = median("kura" SUBSEP "size")
	printf "\nSize after writing (du -sb): TC %s, Kura %s (Kura/TC %s).\n", mb(tc), mb(ku), ratio(ku, tc)
}' "$DATA"
fi

# ---------------------------------------------------------------------------------- the tools

# now: a clock in seconds with nanoseconds.
now() { date +%s.%N; }
# cpu_mark: note the user + system seconds of every child process this shell has waited for
# (`times`, run in this shell: in a subshell its count starts at 0); cpu_read prints them.
cpu_mark() { times >"$WORK/times"; }
cpu_read() {
	awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$WORK/times"
}
# timed VAR CMD...: the wall clock of CMD (output to /dev/null) into VAR, and its CPU time
# (user + system) into CPU.
timed() {
	local __var=$1 t0 t1 c0
	shift
	cpu_mark
	c0=$(cpu_read)
	t0=$(now)
	timeout "$RUN_TIMEOUT" "$@" >/dev/null 2>"$WORK/err" || {
		cat "$WORK/err" >&2
		die "FAILED: $*"
	}
	t1=$(now)
	cpu_mark
	printf -v "$__var" '%s' "$(echo "$t1 - $t0" | bc -l)"
	CPU=$(echo "$(cpu_read) - $c0" | bc -l)
}
# get_stats TOOL CMD...: run a fresh-process get GETS times; record its median wall clock and
# the median peak RSS (KiB).
get_stats() {
	local tool=$1 i t0 t1 rss
	shift
	: >"$WORK/gets"
	for ((i = 0; i < GETS; i++)); do
		t0=$(now)
		/usr/bin/time -f '%M' -o "$WORK/rss" "$@" >/dev/null 2>&1 || die "FAILED: $*"
		t1=$(now)
		rss=$(tail -n 1 "$WORK/rss")
		printf '%s\t%s\n' "$(echo "$t1 - $t0" | bc -l)" "$rss" >>"$WORK/gets"
	done
	rec "$tool" "get_s$n" "$(cut -f1 "$WORK/gets" | sort -g | sed -n "$(((GETS + 1) / 2))p")"
	rec "$tool" "rss_kb$n" "$(cut -f2 "$WORK/gets" | sort -g | sed -n "$(((GETS + 1) / 2))p")"
}

run_tools() {
	local n=$1 dir lo hi t
	dir=$(mktemp -d "$WORK/tools.XXXXXX")
	# The range: 100,000 ids in the middle (all of them in a smaller database).
	if ((n > 100000)); then
		lo=$((n / 2 - 50000 + 1))
		hi=$((n / 2 + 50000))
	else
		lo=1
		hi=$n
	fi
	tcfmgr create "$dir/c.tcf" 8 >/dev/null
	timed t tcfmgr importtsv "$dir/c.tcf" "$WORK/in-$n.tsv"
	rec tc "import$n" "$t"
	rec tc "cpu_import$n" "$CPU"
	rec tc "size$n" "$(size_of "$dir/c.tcf")"
	timed t tcfmgr list -pv "$dir/c.tcf"
	rec tc "export$n" "$t"
	rec tc "cpu_export$n" "$CPU"
	timed t tcfmgr list -pv -rb "$lo" "$hi" "$dir/c.tcf"
	rec tc "range$n" "$t"
	rec tc "cpu_range$n" "$CPU"
	get_stats tc tcfmgr get "$dir/c.tcf" 5

	"$KURA" db create "$dir/c.kf#width=8" >/dev/null
	timed t "$KURA" db import "$dir/c.kf" "$WORK/in-$n.tsv"
	rec kura "import$n" "$t"
	rec kura "cpu_import$n" "$CPU"
	rec kura "size$n" "$(size_of "$dir/c.kf")"
	timed t "$KURA" db export "$dir/c.kf"
	rec kura "export$n" "$t"
	rec kura "cpu_export$n" "$CPU"
	timed t "$KURA" db list --values --from "$lo" --through "$hi" "$dir/c.kf"
	rec kura "range$n" "$t"
	rec kura "cpu_range$n" "$CPU"
	get_stats kura "$KURA" db get "$dir/c.kf" 5
	# Both tools agree on what the database holds.
	cmp -s <(tcfmgr list -pv "$dir/c.tcf") <("$KURA" db export --format raw "$dir/c.kf") ||
		die "kura db export and tcfmgr list -pv differ ($n records)"
	rm -rf "$dir"
}

if has_part tools; then
	command -v bc >/dev/null 2>&1 || die "bc is needed (apt-get install -y bc)"
	: >"$DATA"
	for n in $TOOL_RECORDS; do
		# Ids 1..n shuffled (a fixed seed), each valued its id as %08d.
		seq 1 "$n" | shuf --random-source=<(yes) | awk '{ printf "%d\t%08d\n", $1, $1 }' >"$WORK/in-$n.tsv"
	done
	echo "tool comparison: kura db against tcfmgr, $REPS repetitions, under $WORK" >&2
	for ((rep = 1; rep <= REPS; rep++)); do
		for n in $TOOL_RECORDS; do
			echo "rep $rep/$REPS: $n records" >&2
			run_tools "$n"
		done
	done
	[[ -n ${RAW:-} ]] && cp "$DATA" "$RAW.tools" && echo "raw measurements: $RAW.tools" >&2
	awk -F '\t' -v reps="$REPS" -v sizes="$TOOL_RECORDS" -v gets="$GETS" '
function median(key,    n, i, j, a, tmp) {
	if (!(key in vals)) return ""
	n = split(vals[key], a, " ")
	for (i = 2; i <= n; i++) {
		tmp = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > tmp; j--) a[j + 1] = a[j]
		a[j + 1] = tmp
	}
	if (n % 2) return a[(n + 1) / 2] + 0
	return (a[n / 2] + a[n / 2 + 1]) / 2
}
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "-" : sprintf("%.2f", a / b) }
{ k = $1 SUBSEP $2; vals[k] = (k in vals) ? vals[k] " " $3 : $3 }
END {
	printf "\nkura db against tcfmgr: width 8, ids shuffled, 8-byte values; median of %d runs (a get: of %d fresh\n", reps, gets
	printf "processes in each run). Seconds of process wall clock; speedup = tcfmgr / kura (>= 1.0 is the target).\n\n"
	printf "CPU: user + system seconds of the same runs (medians), less moved by other load on the machine.\n\n"
	printf "| %-9s | %-22s | %12s | %12s | %8s | %10s | %10s | %8s |\n", "records", "operation", "tcfmgr", "kura db", "speedup", "tcfmgr CPU", "kura CPU", "CPU"
	printf "|%s|%s|%s|%s|%s|%s|%s|%s|\n", "-----------", "------------------------", "-------------:", "-------------:", "---------:", "-----------:", "-----------:", "---------:"
	n = split(sizes, S, " ")
	split("import export range get_s", O, " ")
	L[1] = "import"; L[2] = "export"; L[3] = "range of 100K ids"; L[4] = "get (fresh process)"
	for (i = 1; i <= n; i++) {
		for (o = 1; o <= 4; o++) {
			tc = median("tc" SUBSEP O[o] S[i]); ku = median("kura" SUBSEP O[o] S[i])
			ct = median("tc" SUBSEP "cpu_" O[o] S[i]); ck = median("kura" SUBSEP "cpu_" O[o] S[i])
			if (ct == "") printf "| %-9s | %-22s | %11.4fs | %11.4fs | %8s | %10s | %10s | %8s |\n", S[i], L[o], tc, ku, ratio(tc, ku), "", "", ""
			else printf "| %-9s | %-22s | %11.4fs | %11.4fs | %8s | %9.3fs | %9.3fs | %8s |\n", S[i], L[o], tc, ku, ratio(tc, ku), ct, ck, ratio(ct, ck)
		}
		tc = median("tc" SUBSEP "size" S[i]); ku = median("kura" SUBSEP "size" S[i])
		printf "| %-9s | %-22s | %12d | %12d | %8s | | | |\n", S[i], "file bytes (kura/tc)", tc, ku, ratio(ku, tc)
		tc = median("tc" SUBSEP "rss_kb" S[i]); ku = median("kura" SUBSEP "rss_kb" S[i])
		printf "| %-9s | %-22s | %9d KiB | %9d KiB | %8s | | | |\n", S[i], "get peak RSS (kura/tc)", tc, ku, ratio(ku, tc)
	}
}' "$DATA"
fi
