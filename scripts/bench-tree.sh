#!/usr/bin/env bash
# Ordered-store benchmark (issue 24, "Fast, measured side by side"): a Kura ordered database
# (the on-disk B+ tree `PATH.kb` by default, or the in-memory tree `+`) against Tokyo Cabinet's B+ tree
# (tcbtest / tcbmttest) and Kyoto Cabinet's file tree (kctreetest order) on the same workloads:
# RECORDS records with 8-byte `%08d` keys and values equal to the keys, 1 or 2 threads, keys in
# order or random; then a full ordered scan (`tcbmgr list` against `kura db list` and
# `kura-bench scan`); and, with LARGE=1, 10M records of 100-byte values with a 64 MiB cache
# (peak RSS and random reads).
#
# Usage: scripts/bench-tree.sh                       (from anywhere in the repository)
#        KURA_DB=+ scripts/bench-tree.sh             (the in-memory tree instead)
#        LARGE=1 ONLY=large LARGE_REPS=1 scripts/bench-tree.sh   (the large test alone)
#
# Environment:
#   KURA_DB=casket.kb  the Kura database name. Any name but a memory kind is a path inside each
#                      run's fresh directory, parameters allowed; a `.kb` takes cache=BYTES
#                      (1m or more; default 128m), leafsiz, compress, cmp, sync, segsiz, bufsiz,
#                      ckptsiz: `casket.kb#cache=64m`, `casket.kb#sync=none`. A memory kind
#                      (`+`, `+#capnum=…`) is used as is, and kura-bench's read and scan are given
#                      --fill (a fresh process starts empty: the records are stored first,
#                      untimed). Default tuning for every tool, Kura's included.
#   REPS=3             repetitions; the tables show the median of each figure
#   RECORDS=1000000    records per run (even: the 2-thread runs split it in halves)
#   ONLY=engine|scan|large   run only that part (default: engine and scan, and large if LARGE=1)
#   LARGE=1            also run the large test: LARGE_RECORDS=10000000 records of LARGE_VSIZ=100
#                      bytes into "$KURA_DB#cache=$LARGE_CACHE" (LARGE_CACHE=67108864; a memory
#                      kind takes no cache parameter and runs without it), then LARGE_READS=1000000
#                      random reads in a fresh process; LARGE_REPS (default REPS) repetitions
#   RUN_TIMEOUT=600    seconds any single command may take before the script gives up
#   BENCH_TMPDIR=...   where the databases go (default $TMPDIR or /tmp); each run uses a fresh
#                      directory there, removed after the run
#   RAW=file           also keep every single measurement there (tab-separated)
#   KURA_BENCH_BIN=..  use this kura-bench binary instead of building one (KURA_BIN: kura)
#
# Timing: every tool's own in-process wall clock, parsed from its output, open to close.
#   tcbtest / tcbmttest   "time:" of write and of read (each its own process)
#   kctreetest order      -set, then -get in another process; each phase's figure is the sum of
#                         its "time:" lines (open + set|get + close)
#   kura-bench            write / read RESULT "seconds" (write includes an explicit sync, and
#                         close syncs); with --fill, the fill is not in the figure
#   scan                  tcbmgr list and kura db list: process wall clock (date +%s.%N), output
#                         to /dev/null; kura-bench scan: its RESULT (open, walk every record in
#                         key order verifying it, close)
# File sizes are `du -sb` of the database right after the write phase (for a memory kind: the
# bytes kura-bench reports, not a file).
#
# Keys drawn at random: tcbtest -rnd and kctreetest -rnd draw keys with replacement (about 632k
# distinct of 1M; reads meet misses), tcbmttest -rnd draws within each thread's range; Kura runs
# `--rnd --draw`, which draws the same way (see docs/benchmarks/engine.md, "Engine: Kura hash vs …").
#
# Tools are run in a rotating order for every workload and repetition, so that slow drifts of
# a shared machine do not always hit the same tool.

set -euo pipefail

REPS=${REPS:-3}
RECORDS=${RECORDS:-1000000}
BENCH_TMPDIR=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
KURA_DB=${KURA_DB:-casket.kb}
ONLY=${ONLY:-}
LARGE=${LARGE:-0}
LARGE_RECORDS=${LARGE_RECORDS:-10000000}
LARGE_VSIZ=${LARGE_VSIZ:-100}
LARGE_CACHE=${LARGE_CACHE:-67108864}
LARGE_READS=${LARGE_READS:-1000000}
LARGE_REPS=${LARGE_REPS:-$REPS}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}

die() {
	echo "bench-tree: $*" >&2
	exit 1
}

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer"
[[ $LARGE_REPS =~ ^[1-9][0-9]*$ ]] || die "LARGE_REPS must be a positive integer"
[[ $RECORDS =~ ^[1-9][0-9]*$ ]] && ((RECORDS % 2 == 0)) || die "RECORDS must be a positive even integer"
for v in LARGE_RECORDS LARGE_VSIZ LARGE_CACHE LARGE_READS RUN_TIMEOUT; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ -z $ONLY || $ONLY == engine || $ONLY == scan || $ONLY == large ]] || die "ONLY must be engine, scan or large"
[[ -n $KURA_DB ]] || die "KURA_DB is empty"
want() { # PART: whether to run it
	case $1 in
	large) [[ $ONLY == large || ($LARGE == 1 && -z $ONLY) ]] ;;
	*) [[ -z $ONLY || $ONLY == "$1" ]] ;;
	esac
}

# Kura's database: a memory kind as is, anything else inside the run's directory.
kura_mem=0
[[ $KURA_DB == +* || $KURA_DB == \** ]] && kura_mem=1
kura_name() { # DIR [EXTRA_PARAMS]: the name to open
	if ((kura_mem)); then
		printf '%s' "$KURA_DB"
	else
		printf '%s/%s%s' "$1" "$KURA_DB" "${2:-}"
	fi
}
kura_path() { printf '%s/%s' "$1" "${KURA_DB%%#*}"; } # DIR: its files
FILL=() FILL_ALL=()
((kura_mem)) && FILL=(--fill) FILL_ALL=(--fill=all)

TOOLS=(tcbtest tcbmttest tcbmgr kctreetest)
missing=()
for tool in "${TOOLS[@]}"; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})) && [[ $(id -u) == 0 ]]; then
	echo "bench-tree: installing the peers (${missing[*]} missing)..." >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq tokyocabinet-bin kyotocabinet-utils >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq tokyocabinet-bin kyotocabinet-utils >/dev/null; }
	missing=()
	for tool in "${TOOLS[@]}"; do
		command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
	done
fi
if ((${#missing[@]})); then
	echo "bench-tree: missing ${missing[*]}; install the peers with:" >&2
	echo "  sudo apt-get install -y tokyocabinet-bin kyotocabinet-utils" >&2
	exit 1
fi
command -v bc >/dev/null 2>&1 || die "bc is needed (apt-get install -y bc)"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [[ -n ${KURA_BENCH_BIN:-} ]]; then
	BIN=$KURA_BENCH_BIN
	KURA=${KURA_BIN:-$(dirname "$BIN")/kura}
else
	echo "building kura-bench and kura (release)..." >&2
	cargo build --release -q -p kura-bench -p kura
	BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/kura-bench
	KURA=${CARGO_TARGET_DIR:-$ROOT/target}/release/kura
fi
[[ -x $BIN ]] || die "no $BIN after the build"
[[ -x $KURA ]] || die "no $KURA after the build"

WORK=$(mktemp -d "$BENCH_TMPDIR/kura-bench-tree.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/results.tsv
: >"$DATA"

# rec TOOL WORKLOAD METRIC VALUE
rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$DATA"; }

# run_cmd OUTVAR CMD...: run (at most RUN_TIMEOUT seconds), keep the combined output, fail
# loudly with its tail.
run_cmd() {
	local __var=$1 __out
	shift
	if ! __out=$(timeout "$RUN_TIMEOUT" "$@" 2>&1); then
		echo "bench-tree: FAILED (or over ${RUN_TIMEOUT}s): $*" >&2
		tail -n 20 <<<"$__out" >&2
		exit 1
	fi
	printf -v "$__var" '%s' "$__out"
}

size_of() { du -sb "$1" | cut -f1; }
# Field KEY of the first "RESULT op=OP " line of OUT.
kfield() { grep -m1 "^RESULT op=$2 " <<<"$1" | tr ' ' '\n' | sed -n "s/^$3=//p"; }
tc_time() { awk '/^time:/ { t = $2 } END { print t }' <<<"$1"; }
tc_ok() { grep -qx ok <<<"$1" || die "Tokyo Cabinet reported an error"; }
# Sum of kctreetest's "time:" lines (open, phase, close) and the count after the phase.
kc_sum() { awk '/^time:/ { t += $2 } /^count:/ { n = $2 } END { printf "%.3f %d\n", t, n }' <<<"$1"; }
now() { date +%s.%N; }

# Workloads: name, threads, random (0/1).
WORKLOADS=(seq1:1:0 rnd1:1:1 seq2:2:0 rnd2:2:1)

run_tc() { # WL T R
	local wl=$1 t=$2 r=$3 dir out tw tr sz n rflag=()
	((r)) && rflag=(-rnd)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	if ((t == 1)); then
		run_cmd out tcbtest write "${rflag[@]}" "$dir/casket.tcb" "$RECORDS"
	else
		run_cmd out tcbmttest write "${rflag[@]}" "$dir/casket.tcb" "$t" $((RECORDS / t))
	fi
	tc_ok "$out"
	tw=$(tc_time "$out")
	n=$(awk '/^record number:/ { n = $3 } END { print n }' <<<"$out")
	sz=$(size_of "$dir/casket.tcb")
	if ((t == 1)); then
		run_cmd out tcbtest read "${rflag[@]}" "$dir/casket.tcb"
	else
		run_cmd out tcbmttest read "${rflag[@]}" "$dir/casket.tcb" "$t"
	fi
	tc_ok "$out"
	tr=$(tc_time "$out")
	rm -rf "$dir"
	rec tc "$wl" write "$tw"
	rec tc "$wl" read "$tr"
	rec tc "$wl" size "$sz"
	rec tc "$wl" count "$n"
	echo "    TC    write ${tw}s read ${tr}s size $sz ($n records)" >&2
}

run_kc() { # WL T R
	local wl=$1 t=$2 r=$3 dir out tw tr sz n x rflag=()
	((r)) && rflag=(-rnd)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	run_cmd out kctreetest order -set -th "$t" "${rflag[@]}" "$dir/casket.kct" $((RECORDS / t))
	grep -qx ok <<<"$out" || die "Kyoto Cabinet reported an error (set)"
	read -r tw n <<<"$(kc_sum "$out")"
	sz=$(size_of "$dir/casket.kct")
	run_cmd out kctreetest order -get -th "$t" "${rflag[@]}" "$dir/casket.kct" $((RECORDS / t))
	grep -qx ok <<<"$out" || die "Kyoto Cabinet reported an error (get)"
	read -r tr x <<<"$(kc_sum "$out")"
	rm -rf "$dir"
	rec kc "$wl" write "$tw"
	rec kc "$wl" read "$tr"
	rec kc "$wl" size "$sz"
	rec kc "$wl" count "$n"
	echo "    KC    set ${tw}s get ${tr}s size $sz ($n records)" >&2
}

run_kura() { # WL T R: kura-bench write, then read in another process
	local wl=$1 t=$2 r=$3 dir out tw tr sz n name rflag=()
	((r)) && rflag=(--rnd --draw)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	name=$(kura_name "$dir")
	run_cmd out "$BIN" write -n "$RECORDS" -t "$t" "${rflag[@]}" "$name"
	tw=$(kfield "$out" write seconds)
	n=$(kfield "$out" write count)
	if ((kura_mem)); then
		sz=$(kfield "$out" write file_size)
	else
		sz=$(size_of "$(kura_path "$dir")")
	fi
	run_cmd out "$BIN" read -n "$RECORDS" -t "$t" "${rflag[@]}" "${FILL[@]}" "$name"
	tr=$(kfield "$out" read seconds)
	rm -rf "$dir"
	rec kura "$wl" write "$tw"
	rec kura "$wl" read "$tr"
	rec kura "$wl" size "$sz"
	rec kura "$wl" count "$n"
	echo "    Kura  write ${tw}s read ${tr}s size $sz ($n records)" >&2
}

# Scan: one database of each with the same RECORDS records in key order, made once (not timed).
SCAN=$WORK/scan
setup_scan() {
	local out n
	mkdir -p "$SCAN"
	echo "scan: making the databases..." >&2
	run_cmd out tcbtest write "$SCAN/casket.tcb" "$RECORDS"
	tc_ok "$out"
	n=$(tcbmgr list "$SCAN/casket.tcb" | wc -l)
	((n == RECORDS)) || die "scan: tcbmgr list printed $n keys, not $RECORDS"
	if ((!kura_mem)); then
		run_cmd out "$BIN" write -n "$RECORDS" "$(kura_name "$SCAN")"
		n=$("$KURA" db list "$(kura_name "$SCAN")" | wc -l)
		((n == RECORDS)) || die "scan: kura db list printed $n keys, not $RECORDS"
		cmp -s <(tcbmgr list -pv "$SCAN/casket.tcb") <("$KURA" db list --values "$(kura_name "$SCAN")") ||
			die "scan: kura db list --values and tcbmgr list -pv differ"
	fi
}
run_scan() { # TOOL
	local t0 t1 t out
	case $1 in
	tc | tc_pv)
		local pv=()
		[[ $1 == tc_pv ]] && pv=(-pv)
		t0=$(now)
		timeout "$RUN_TIMEOUT" tcbmgr list "${pv[@]}" "$SCAN/casket.tcb" >/dev/null || die "tcbmgr list failed"
		t1=$(now)
		t=$(echo "$t1 - $t0" | bc -l)
		;;
	kura_list | kura_list_pv)
		local pv=()
		[[ $1 == kura_list_pv ]] && pv=(--values)
		t0=$(now)
		timeout "$RUN_TIMEOUT" "$KURA" db list "${pv[@]}" "$(kura_name "$SCAN")" >/dev/null || die "kura db list failed"
		t1=$(now)
		t=$(echo "$t1 - $t0" | bc -l)
		;;
	kura_scan)
		run_cmd out "$BIN" scan -n "$RECORDS" "${FILL[@]}" "$(kura_name "$SCAN")"
		t=$(kfield "$out" scan seconds)
		;;
	esac
	rec "$1" scan seconds "$t"
	printf '    %-12s %.3fs\n' "$1" "$t" >&2
}

# Large: LARGE_RECORDS records of LARGE_VSIZ bytes, written in key order, then LARGE_READS
# lookups drawn at random in a fresh process; peak RSS of each process (VmHWM).
large_name() { # DIR
	if ((kura_mem)); then kura_name "$1"; else kura_name "$1" "#cache=$LARGE_CACHE"; fi
}
run_large() {
	local dir name out tw hw sz tr gr hr rate misses
	dir=$(mktemp -d "$WORK/large.XXXXXX")
	name=$(large_name "$dir")
	run_cmd out "$BIN" write -n "$LARGE_RECORDS" --vsiz "$LARGE_VSIZ" "$name"
	tw=$(kfield "$out" write seconds)
	hw=$(kfield "$out" write vm_hwm_kb)
	if ((kura_mem)); then sz=$(kfield "$out" write file_size); else sz=$(size_of "$(kura_path "$dir")"); fi
	run_cmd out "$BIN" read -n "$LARGE_RECORDS" --vsiz "$LARGE_VSIZ" --rnd --draw --reads "$LARGE_READS" "${FILL_ALL[@]}" "$name"
	tr=$(kfield "$out" read seconds)
	gr=$(kfield "$out" read get_seconds)
	hr=$(kfield "$out" read vm_hwm_kb)
	misses=$(kfield "$out" read misses)
	[[ $misses == 0 ]] || die "large: $misses random reads missed"
	rm -rf "$dir"
	rate=$(echo "$LARGE_READS / $gr" | bc -l)
	rec large large write "$tw"
	rec large large write_hwm "$hw"
	rec large large size "$sz"
	rec large large read "$tr"
	rec large large get "$gr"
	rec large large get_rate "$rate"
	rec large large read_hwm "$hr"
	printf '    write %ss (VmHWM %d MiB, size %d MB); read %ss, gets %ss = %.0f/s (VmHWM %d MiB)\n' \
		"$tw" $((hw / 1024)) $((sz / 1000000)) "$tr" "$gr" "$rate" $((hr / 1024)) >&2
}

echo "ordered-store benchmark: Kura database '$KURA_DB', $RECORDS records, $REPS repetitions," \
	"under $WORK (a shared machine: $(nproc) cores)" >&2
want scan && setup_scan
for ((rep = 1; rep <= REPS; rep++)); do
	if want engine; then
		widx=0
		for w in "${WORKLOADS[@]}"; do
			IFS=: read -r wl t r <<<"$w"
			tools=(tc kc kura)
			k=${#tools[@]}
			echo "rep $rep/$REPS, $wl ($t thread(s), $([[ $r == 1 ]] && echo random || echo sequential)):" >&2
			for ((i = 0; i < k; i++)); do
				case ${tools[$(((i + rep - 1 + widx) % k))]} in
				tc) run_tc "$wl" "$t" "$r" ;;
				kc) run_kc "$wl" "$t" "$r" ;;
				kura) run_kura "$wl" "$t" "$r" ;;
				esac
			done
			widx=$((widx + 1))
		done
	fi
	if want scan; then
		echo "rep $rep/$REPS, full ordered scan of $RECORDS records:" >&2
		tools=(tc tc_pv kura_scan)
		((kura_mem)) || tools+=(kura_list kura_list_pv)
		k=${#tools[@]}
		for ((i = 0; i < k; i++)); do
			run_scan "${tools[$(((i + rep - 1) % k))]}"
		done
	fi
done
if want large; then
	for ((rep = 1; rep <= LARGE_REPS; rep++)); do
		echo "large rep $rep/$LARGE_REPS: $LARGE_RECORDS records of $LARGE_VSIZ bytes into '$(large_name DIR)'," \
			"$LARGE_READS random reads:" >&2
		run_large
	done
fi

[[ -n ${RAW:-} ]] && cp "$DATA" "$RAW" && echo "raw measurements: $RAW" >&2

# Medians and tables.
awk -F '\t' -v reps="$REPS" -v records="$RECORDS" -v kdb="$KURA_DB" -v kmem="$kura_mem" -v lreps="$LARGE_REPS" \
	-v lrec="$LARGE_RECORDS" -v lvsiz="$LARGE_VSIZ" -v lreads="$LARGE_READS" -v lcache="$LARGE_CACHE" '
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
function mx(key,    n, i, a, m) {
	if (!(key in vals)) return ""
	n = split(vals[key], a, " "); m = a[1] + 0
	for (i = 2; i <= n; i++) if (a[i] + 0 > m) m = a[i] + 0
	return m
}
function sec(v) { return v == "" ? "-" : sprintf("%.3f", v) }
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "-" : sprintf("%.2f", a / b) }
function mb(v) { return v == "" ? "-" : sprintf("%.1f MB", v / 1e6) }
function cnt(v) { return v == "" ? "-" : sprintf("%d", v) }
function min2(a, b) { return (a == "") ? b : (b == "" || a < b) ? a : b }
{ k = $1 SUBSEP $2 SUBSEP $3; vals[k] = (k in vals) ? vals[k] " " $4 : $4 }
END {
	nw = split("seq1 rnd1 seq2 rnd2", W, " ")
	desc["seq1"] = "1 thread, in order"; desc["rnd1"] = "1 thread, random"
	desc["seq2"] = "2 threads, in order"; desc["rnd2"] = "2 threads, random"
	if (("tc" SUBSEP "seq1" SUBSEP "write") in vals) {
		printf "\nOrdered stores: %d records (8-byte keys and values), median of %d runs, seconds, open to close (lower is better).\n", records, reps
		printf "TC = tcbtest / tcbmttest write, read; KC = kctreetest order -set, -get (-th 2); Kura = kura-bench write, read on %s.\n", kdb
		printf "Kura/TC, Kura/KC: time ratios (below 1: Kura faster). Speed vs best: the faster peer'"'"'s time / Kura'"'"'s (target >= 1.5).\n\n"
		printf "| %-20s | %-5s | %8s | %8s | %8s | %7s | %7s | %13s |\n", "workload", "phase", "TC", "KC", "Kura", "Kura/TC", "Kura/KC", "speed vs best"
		printf "|%s|%s|%s|%s|%s|%s|%s|%s|\n", "----------------------", "-------", "---------:", "---------:", "---------:", "--------:", "--------:", "--------------:"
		for (i = 1; i <= nw; i++) {
			w = W[i]
			for (p = 1; p <= 2; p++) {
				ph = (p == 1) ? "write" : "read"
				tc = median("tc" SUBSEP w SUBSEP ph); kc = median("kc" SUBSEP w SUBSEP ph)
				ku = median("kura" SUBSEP w SUBSEP ph)
				printf "| %-20s | %-5s | %8s | %8s | %8s | %7s | %7s | %13s |\n", desc[w], ph, sec(tc), sec(kc), sec(ku), ratio(ku, tc), ratio(ku, kc), ratio(min2(tc, kc), ku)
			}
		}
		printf "\nFile size after writing (du -sb; records stored in brackets: -rnd draws keys with replacement)%s.\n\n", kmem ? "; Kura: a memory kind, so the bytes it counts in memory, not a file" : ""
		printf "| %-20s | %22s | %22s | %22s | %8s |\n", "workload", "TC (.tcb)", "KC (.kct)", kmem ? "Kura (in memory)" : "Kura", "Kura/TC"
		printf "|%s|%s|%s|%s|%s|\n", "----------------------", "-----------------------:", "-----------------------:", "-----------------------:", "---------:"
		for (i = 1; i <= nw; i++) {
			w = W[i]
			split("tc kc kura", T, " ")
			for (j = 1; j <= 3; j++) {
				s = median(T[j] SUBSEP w SUBSEP "size"); n = median(T[j] SUBSEP w SUBSEP "count")
				cell[j] = (s == "") ? "-" : mb(s) " (" cnt(n) ")"
			}
			printf "| %-20s | %22s | %22s | %22s | %8s |\n", desc[w], cell[1], cell[2], cell[3], kmem ? "-" : ratio(median("kura" SUBSEP w SUBSEP "size"), median("tc" SUBSEP w SUBSEP "size"))
		}
		printf "\n2 threads vs 1 thread: time with 1 thread / time with 2 threads (above 1 = faster with 2).\n\n"
		printf "| %-16s | %6s | %6s | %6s |\n", "phase", "TC", "KC", "Kura"
		printf "|%s|%s|%s|%s|\n", "------------------", "-------:", "-------:", "-------:"
		split("seq rnd", O, " ")
		for (o = 1; o <= 2; o++) for (p = 1; p <= 2; p++) {
			ph = (p == 1) ? "write" : "read"
			a1 = O[o] "1"; a2 = O[o] "2"
			printf "| %-16s | %6s | %6s | %6s |\n", ((o == 1) ? "in order " : "random ") ph, \
				ratio(median("tc" SUBSEP a1 SUBSEP ph), median("tc" SUBSEP a2 SUBSEP ph)), \
				ratio(median("kc" SUBSEP a1 SUBSEP ph), median("kc" SUBSEP a2 SUBSEP ph)), \
				ratio(median("kura" SUBSEP a1 SUBSEP ph), median("kura" SUBSEP a2 SUBSEP ph))
		}
	}
	if (("tc" SUBSEP "scan" SUBSEP "seconds") in vals) {
		tc = median("tc" SUBSEP "scan" SUBSEP "seconds"); tv = median("tc_pv" SUBSEP "scan" SUBSEP "seconds")
		ks = median("kura_scan" SUBSEP "scan" SUBSEP "seconds")
		kl = median("kura_list" SUBSEP "scan" SUBSEP "seconds"); kv = median("kura_list_pv" SUBSEP "scan" SUBSEP "seconds")
		printf "\nFull ordered scan of %d records, median of %d runs, seconds (lower is better).\n", records, reps
		printf "tcbmgr list and kura db list: process wall clock, output to /dev/null; kura-bench scan: open to close in the process%s.\n\n", (kl == "") ? " (memory kind: filled first, not timed; kura db list needs an on-disk database)" : ""
		printf "| %-34s | %8s | %16s |\n", "command", "seconds", "tcbmgr list / it"
		printf "|%s|%s|%s|\n", "------------------------------------", "---------:", "-----------------:"
		printf "| %-34s | %8s | %16s |\n", "tcbmgr list (keys)", sec(tc), ""
		printf "| %-34s | %8s | %16s |\n", "tcbmgr list -pv (keys and values)", sec(tv), ""
		printf "| %-34s | %8s | %16s |\n", "kura db list (keys)", sec(kl), ratio(tc, kl)
		printf "| %-34s | %8s | %16s |\n", "kura db list --values", sec(kv), ratio(tv, kv)
		printf "| %-34s | %8s | %16s |\n", "kura-bench scan (keys and values)", sec(ks), ratio(tc, ks)
	}
	if (("large" SUBSEP "large" SUBSEP "write") in vals) {
		printf "\nLarge: %d records of %d-byte values in key order, then %d random reads (drawn from all) in a fresh process;\n", lrec, lvsiz, lreads
		printf "Kura database %s%s; median of %d runs (peak RSS: the largest VmHWM of the runs).\n\n", kdb, (kdb ~ /^[+*]/) ? " (a memory kind: no cache parameter)" : "#cache=" lcache, lreps
		printf "| %-30s | %14s |\n", "figure", "value"
		printf "|%s|%s|\n", "--------------------------------", "---------------:"
		printf "| %-30s | %14s |\n", "write, seconds", sec(median("large" SUBSEP "large" SUBSEP "write"))
		printf "| %-30s | %14s |\n", "peak RSS writing, MiB", sprintf("%.0f", mx("large" SUBSEP "large" SUBSEP "write_hwm") / 1024)
		printf "| %-30s | %14s |\n", "size after writing", mb(median("large" SUBSEP "large" SUBSEP "size"))
		printf "| %-30s | %14s |\n", "read process, seconds", sec(median("large" SUBSEP "large" SUBSEP "read"))
		printf "| %-30s | %14s |\n", "random gets, seconds", sec(median("large" SUBSEP "large" SUBSEP "get"))
		printf "| %-30s | %14s |\n", "random gets per second", sprintf("%.0f", median("large" SUBSEP "large" SUBSEP "get_rate"))
		printf "| %-30s | %14s |\n", "peak RSS reading, MiB", sprintf("%.0f", mx("large" SUBSEP "large" SUBSEP "read_hwm") / 1024)
	}
}' "$DATA"
