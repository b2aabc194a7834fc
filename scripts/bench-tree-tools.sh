#!/usr/bin/env bash
# The B+ tree through the command-line tools: `kura db` on a `PATH.kb` against Tokyo Cabinet's
# `tcbmgr` and Kyoto Cabinet's `kctreemgr`, on RECORDS records with 8-byte `%08d` keys and
# values equal to the keys: `import` of the records in key order and shuffled (a fixed seed;
# `tcbmgr importtsv`, `kctreemgr import`), `export` of the in-order database (`list -pv`), a
# range of 100,000 keys from the middle (`kura db list --values --from LO --through HI`,
# `tcbmgr list -pv -rb LO HI`, `kctreemgr list -pv -max 100000 PATH LO`), and the file size
# after the in-order import. Every database is made empty first by its tool's `create`
# (not timed); every figure is the process wall clock.
#
# Usage: scripts/bench-tree-tools.sh      (from anywhere in the repository)
#
# Environment:
#   REPS=3            repetitions; the table shows the median of each figure
#   RECORDS=1000000   records per run
#   RUN_TIMEOUT=600   seconds any single command may take before the script gives up
#   BENCH_TMPDIR=...  where the databases go (default $TMPDIR or /tmp); a fresh directory there,
#                     removed afterwards
#   RAW=file          also keep every single measurement there (tab-separated)
#   KURA_BIN=...      use this kura binary instead of building one
#
# The three tools take turns going first in each repetition, so that slow drifts of a shared
# machine do not always hit the same one. The script checks that the three exports agree.

set -euo pipefail

REPS=${REPS:-3}
RECORDS=${RECORDS:-1000000}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
BENCH_TMPDIR=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}

die() {
	echo "bench-tree-tools: $*" >&2
	exit 1
}

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer"
[[ $RECORDS =~ ^[1-9][0-9]*$ ]] && ((RECORDS <= 99999999)) ||
	die "RECORDS must be a positive integer below 100,000,000 (8-digit keys)"
for t in tcbmgr kctreemgr bc; do
	command -v "$t" >/dev/null 2>&1 ||
		die "$t is missing: sudo apt-get install -y tokyocabinet-bin kyotocabinet-utils bc"
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [[ -n ${KURA_BIN:-} ]]; then
	KURA=$KURA_BIN
else
	echo "building kura (release)..." >&2
	cargo build --release -q -p kura
	KURA=${CARGO_TARGET_DIR:-$ROOT/target}/release/kura
fi
[[ -x $KURA ]] || die "no $KURA after the build"

WORK=$(mktemp -d "$BENCH_TMPDIR/kura-bench-tree-tools.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/results.tsv
: >"$DATA"
rec() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$DATA"; }

now() { date +%s.%N; }
# cpu_mark: note the user + system seconds of every child process this shell has waited for
# (`times`, run in this shell: in a subshell its count starts at 0); cpu_read prints them.
cpu_mark() { times >"$WORK/times"; }
cpu_read() {
	awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$WORK/times"
}
# timed TOOL METRIC CMD...: record the wall clock of CMD (output to /dev/null) as METRIC and
# its CPU time (user + system) as cpu_METRIC.
timed() {
	local tool=$1 metric=$2 t0 t1 c0
	shift 2
	cpu_mark
	c0=$(cpu_read)
	t0=$(now)
	timeout "$RUN_TIMEOUT" "$@" >/dev/null 2>"$WORK/err" || {
		cat "$WORK/err" >&2
		die "FAILED: $*"
	}
	t1=$(now)
	cpu_mark
	rec "$tool" "$metric" "$(echo "$t1 - $t0" | bc -l)"
	rec "$tool" "cpu_$metric" "$(echo "$(cpu_read) - $c0" | bc -l)"
}

seq 1 "$RECORDS" | awk '{ printf "%08d\t%08d\n", $1, $1 }' >"$WORK/order.tsv"
shuf --random-source=<(yes) "$WORK/order.tsv" >"$WORK/shuffled.tsv"
if ((RECORDS > 100000)); then
	LO=$(printf '%08d' $((RECORDS / 2 - 50000 + 1)))
	HI=$(printf '%08d' $((RECORDS / 2 + 50000)))
	MAX=100000
else
	LO=$(printf '%08d' 1)
	HI=$(printf '%08d' "$RECORDS")
	MAX=$RECORDS
fi

run_tc() {
	local d=$WORK/tc
	rm -rf "$d" && mkdir "$d"
	tcbmgr create "$d/s.tcb" >/dev/null
	timed tc import_shuffled tcbmgr importtsv "$d/s.tcb" "$WORK/shuffled.tsv"
	tcbmgr create "$d/o.tcb" >/dev/null
	timed tc import_order tcbmgr importtsv "$d/o.tcb" "$WORK/order.tsv"
	rec tc size "$(du -sb "$d/o.tcb" | cut -f1)"
	timed tc export tcbmgr list -pv "$d/o.tcb"
	timed tc range tcbmgr list -pv -rb "$LO" "$HI" "$d/o.tcb"
}

run_kc() {
	local d=$WORK/kc
	rm -rf "$d" && mkdir "$d"
	kctreemgr create "$d/s.kct" >/dev/null
	timed kc import_shuffled kctreemgr import "$d/s.kct" "$WORK/shuffled.tsv"
	kctreemgr create "$d/o.kct" >/dev/null
	timed kc import_order kctreemgr import "$d/o.kct" "$WORK/order.tsv"
	rec kc size "$(du -sb "$d/o.kct" | cut -f1)"
	timed kc export kctreemgr list -pv "$d/o.kct"
	timed kc range kctreemgr list -pv -max "$MAX" "$d/o.kct" "$LO"
}

run_kura() {
	local d=$WORK/kura
	rm -rf "$d" && mkdir "$d"
	"$KURA" db create "$d/s.kb" >/dev/null
	timed kura import_shuffled "$KURA" db import "$d/s.kb" "$WORK/shuffled.tsv"
	"$KURA" db create "$d/o.kb" >/dev/null
	timed kura import_order "$KURA" db import "$d/o.kb" "$WORK/order.tsv"
	rec kura size "$(du -sb "$d/o.kb" | cut -f1)"
	timed kura export "$KURA" db export --format raw "$d/o.kb"
	timed kura range "$KURA" db list --values --from "$LO" --through "$HI" "$d/o.kb"
}

echo "B+ tree tools: kura db against tcbmgr and kctreemgr, $RECORDS records, $REPS repetitions," \
	"under $WORK" >&2
order=(tc kc kura)
for ((rep = 1; rep <= REPS; rep++)); do
	echo "rep $rep/$REPS: ${order[*]}" >&2
	for tool in "${order[@]}"; do
		"run_$tool"
	done
	if ((rep == 1)); then
		cmp -s <(tcbmgr list -pv "$WORK/tc/o.tcb") <("$KURA" db export --format raw "$WORK/kura/o.kb") ||
			die "kura db export and tcbmgr list -pv differ"
		cmp -s <(kctreemgr list -pv "$WORK/kc/o.kct") <("$KURA" db export --format raw "$WORK/kura/o.kb") ||
			die "kura db export and kctreemgr list -pv differ"
	fi
	order=("${order[@]:1}" "${order[0]}")
done
[[ -n ${RAW:-} ]] && cp "$DATA" "$RAW" && echo "raw measurements: $RAW" >&2

awk -F '\t' -v reps="$REPS" -v records="$RECORDS" '
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
function min2(a, b) { return (a + 0 < b + 0) ? a : b }
{ k = $1 SUBSEP $2; vals[k] = (k in vals) ? vals[k] " " $3 : $3 }
END {
	printf "\nkura db against tcbmgr and kctreemgr: %d records, 8-byte keys and values; median of %d runs;\n", records, reps
	printf "seconds of process wall clock; speedup = the faster peer / kura db (>= 1.0: Kura faster); CPU:\n"
	printf "user + system seconds of the same runs, and the least of the peers / kura db.\n\n"
	printf "| %-22s | %9s | %9s | %9s | %8s | %9s | %9s | %9s | %8s |\n", "operation", "tcbmgr", "kctreemgr", "kura db", "speedup", "tcb CPU", "kct CPU", "kura CPU", "CPU"
	printf "|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------", "----------:", "----------:", "----------:", "---------:", "----------:", "----------:", "----------:", "---------:"
	split("import_order import_shuffled export range", O, " ")
	L[1] = "import, keys in order"; L[2] = "import, keys shuffled"; L[3] = "export"; L[4] = "range of 100K keys"
	for (o = 1; o <= 4; o++) {
		tc = median("tc" SUBSEP O[o]); kc = median("kc" SUBSEP O[o]); ku = median("kura" SUBSEP O[o])
		ct = median("tc" SUBSEP "cpu_" O[o]); ckc = median("kc" SUBSEP "cpu_" O[o]); cku = median("kura" SUBSEP "cpu_" O[o])
		printf "| %-22s | %8.3fs | %8.3fs | %8.3fs | %8s | %8.3fs | %8.3fs | %8.3fs | %8s |\n", L[o], tc, kc, ku, ratio(min2(tc, kc), ku), ct, ckc, cku, ratio(min2(ct, ckc), cku)
	}
	tc = median("tc" SUBSEP "size"); kc = median("kc" SUBSEP "size"); ku = median("kura" SUBSEP "size")
	printf "| %-22s | %9d | %9d | %9d | %8s | | | | |\n", "file bytes (kura/tcb)", tc, kc, ku, ratio(ku, tc)
}' "$DATA"
