#!/usr/bin/env bash
# Engine benchmark: Kura's on-disk hash (`.kh`) against Tokyo Cabinet (tchtest / tchmttest) and
# Kyoto Cabinet (kchashtest order) on the same workloads: RECORDS records with 8-byte `%08d` keys
# and values equal to the keys, 1 or 2 threads, sequential or random order; and the export of
# such a database to a TSV file: `kura db export` against `tchmgr list -pv` and
# `kchashmgr list -pv` (the same lines).
#
# Usage: scripts/bench-engine.sh            (from anywhere in the repository)
#
# Environment:
#   REPS=3            repetitions; the tables show the median of each figure
#   RECORDS=1000000   records per run (must be even: the 2-thread runs split it in halves)
#   ONLY=export       run only the export comparison (ONLY=engine: only the workloads)
#   BENCH_TMPDIR=...  where the databases go (default $TMPDIR or /tmp); each run uses a fresh
#                     directory there, removed after the run
#   RAW=file          also keep every single measurement there (tab-separated)
#   KURA_BENCH_BIN=.. use this kura-bench binary instead of building one
#
# Timing: every tool's own in-process wall clock, parsed from its output.
#   tchtest / tchmttest   "time:" of write and of read: open to close, included
#   kchashtest order      its per-phase "time:" lines; "set" = open + set, "remove" = remove +
#                         close, so that the three phases add up to the whole run
#   kura-bench            its RESULT lines: write/read = open to close (write includes sync),
#                         order phases grouped as for kchashtest
# File sizes are `du -sb` of the database (a file for TC/KC, a directory of segments for Kura)
# right after the write phase; for kchashtest, which removes its records before closing, the
# "size:" it prints after setting.
#
# Tools are run in a different (rotating) order for every workload and repetition, so that slow
# drifts of a shared machine do not always hit the same tool.

set -euo pipefail

REPS=${REPS:-3}
RECORDS=${RECORDS:-1000000}
BENCH_TMPDIR=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}

die() {
	echo "bench-engine: $*" >&2
	exit 1
}

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer"
[[ $RECORDS =~ ^[1-9][0-9]*$ ]] && ((RECORDS % 2 == 0)) || die "RECORDS must be a positive even integer"

ONLY=${ONLY:-}
[[ -z $ONLY || $ONLY == export || $ONLY == engine ]] || die "ONLY must be export or engine"

missing=()
for tool in tchtest tchmttest tchmgr kchashtest kchashmgr; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})) && [[ $(id -u) == 0 ]]; then
	echo "bench-engine: installing the peers (${missing[*]} missing)..." >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq tokyocabinet-bin kyotocabinet-utils >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq tokyocabinet-bin kyotocabinet-utils >/dev/null; }
	missing=()
	for tool in tchtest tchmttest tchmgr kchashtest kchashmgr; do
		command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
	done
fi
if ((${#missing[@]})); then
	echo "bench-engine: missing ${missing[*]}; install the peers with:" >&2
	echo "  sudo apt-get install -y tokyocabinet-bin kyotocabinet-utils" >&2
	exit 1
fi

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

WORK=$(mktemp -d "$BENCH_TMPDIR/kura-bench-engine.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/results.tsv
: >"$DATA"

# rec TOOL WORKLOAD METRIC VALUE
rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$DATA"; }

# run_cmd OUTVAR CMD...: run, keep the combined output, fail loudly with its tail.
run_cmd() {
	local __var=$1 __out
	shift
	if ! __out=$("$@" 2>&1); then
		echo "bench-engine: FAILED: $*" >&2
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

# Workloads: name, threads, random (0/1).
WORKLOADS=(seq1:1:0 rnd1:1:1 seq2:2:0 rnd2:2:1)

run_tc() { # WL T R
	local wl=$1 t=$2 r=$3 dir out tw tr sz n rflag=()
	((r)) && rflag=(-rnd)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	if ((t == 1)); then
		run_cmd out tchtest write "${rflag[@]}" "$dir/casket.tch" "$RECORDS"
	else
		run_cmd out tchmttest write "${rflag[@]}" "$dir/casket.tch" "$t" $((RECORDS / t))
	fi
	tc_ok "$out"
	tw=$(tc_time "$out")
	n=$(awk '/^record number:/ { n = $3 } END { print n }' <<<"$out")
	sz=$(size_of "$dir/casket.tch")
	if ((t == 1)); then
		run_cmd out tchtest read "${rflag[@]}" "$dir/casket.tch"
	else
		run_cmd out tchmttest read "${rflag[@]}" "$dir/casket.tch" "$t"
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
	local wl=$1 t=$2 r=$3 dir out vals rflag=()
	((r)) && rflag=(-rnd)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	run_cmd out kchashtest order -th "$t" "${rflag[@]}" "$dir/casket.kch" $((RECORDS / t))
	grep -qx ok <<<"$out" || die "Kyoto Cabinet reported an error"
	# open set get remove close set-size set-count
	vals=$(awk '
		/^opening the database:/ { ph = "open" }
		/^setting records:/      { ph = "set" }
		/^getting records:/      { ph = "get" }
		/^removing records:/     { ph = "remove" }
		/^closing the database:/ { ph = "close" }
		/^time:/                 { t[ph] = $2 }
		/^size:/  && ph == "set" { sz = $2 }
		/^count:/ && ph == "set" { n = $2 }
		END { print t["open"], t["set"], t["get"], t["remove"], t["close"], sz, n }' <<<"$out")
	rm -rf "$dir"
	read -r o s g m c sz n <<<"$vals"
	[[ -n $n ]] || die "could not parse kchashtest output"
	rec kc "$wl" set "$(echo "$o + $s" | bc -l)"
	rec kc "$wl" get "$g"
	rec kc "$wl" remove "$(echo "$m + $c" | bc -l)"
	rec kc "$wl" size "$sz"
	rec kc "$wl" count "$n"
	echo "    KC    open+set ${o}+${s}s get ${g}s remove+close ${m}+${c}s size $sz ($n records)" >&2
}

run_kura() { # TOOL WL T R SUFFIX: kura-bench write then read
	local tool=$1 wl=$2 t=$3 r=$4 suffix=$5 dir out tw tr sz n rflag=()
	((r)) && rflag=(--rnd --draw)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	run_cmd out "$BIN" write -n "$RECORDS" -t "$t" "${rflag[@]}" "$dir/casket.kh$suffix"
	tw=$(kfield "$out" write seconds)
	n=$(kfield "$out" write count)
	sz=$(size_of "$dir/casket.kh")
	run_cmd out "$BIN" read -n "$RECORDS" -t "$t" "${rflag[@]}" "$dir/casket.kh$suffix"
	tr=$(kfield "$out" read seconds)
	rm -rf "$dir"
	rec "$tool" "$wl" write "$tw"
	rec "$tool" "$wl" read "$tr"
	rec "$tool" "$wl" size "$sz"
	rec "$tool" "$wl" count "$n"
	echo "    $tool write ${tw}s read ${tr}s size $sz ($n records)" >&2
}

run_kura_order() { # WL T R
	local wl=$1 t=$2 r=$3 dir out o s g m c rflag=()
	((r)) && rflag=(--rnd --draw)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	run_cmd out "$BIN" order -n "$RECORDS" -t "$t" "${rflag[@]}" "$dir/casket.kh#sync=none"
	rm -rf "$dir"
	o=$(kfield "$out" open seconds)
	s=$(kfield "$out" set seconds)
	g=$(kfield "$out" get seconds)
	m=$(kfield "$out" remove seconds)
	c=$(kfield "$out" close seconds)
	rec kura_order "$wl" set "$(echo "$o + $s" | bc -l)"
	rec kura_order "$wl" get "$g"
	rec kura_order "$wl" remove "$(echo "$m + $c" | bc -l)"
	echo "    Kura order open+set ${o}+${s}s get ${g}s remove+close ${m}+${c}s" >&2
}

command -v bc >/dev/null 2>&1 || die "bc is needed (apt-get install -y bc)"

# Export: one database of each kind with the same RECORDS records, made once (not timed).
EXP=$WORK/export
setup_export() {
	local out tool
	mkdir -p "$EXP"
	echo "export: making the databases..." >&2
	run_cmd out tchtest write "$EXP/casket.tch" "$RECORDS"
	tc_ok "$out"
	tchmgr list -pv "$EXP/casket.tch" >"$EXP/ref.tsv"
	run_cmd out kchashmgr create "$EXP/casket.kch"
	kchashmgr import "$EXP/casket.kch" "$EXP/ref.tsv" >/dev/null || die "kchashmgr import failed"
	run_cmd out "$BIN" write -n "$RECORDS" "$EXP/casket.kh#sync=none"
	sort "$EXP/ref.tsv" >"$EXP/ref.sorted"
	for tool in tc kc kura; do
		export_cmd "$tool" >"$EXP/out.tsv" || die "export with $tool failed"
		sort "$EXP/out.tsv" | cmp -s - "$EXP/ref.sorted" || die "export: $tool wrote other lines"
	done
	rm -f "$EXP/ref.tsv" "$EXP/ref.sorted" "$EXP/out.tsv"
}
export_cmd() { # TOOL: every record as KEY<TAB>VALUE lines on stdout
	case $1 in
	tc) tchmgr list -pv "$EXP/casket.tch" ;;
	kc) kchashmgr list -pv "$EXP/casket.kch" ;;
	kura) "$KURA" db export "$EXP/casket.kh" ;;
	esac
}
run_export() { # TOOL: wall time of an export into a file (process start to exit)
	local t0 t1 t
	t0=$(date +%s.%N)
	export_cmd "$1" >"$EXP/out.tsv" || die "export with $1 failed"
	t1=$(date +%s.%N)
	t=$(echo "$t1 - $t0" | bc -l)
	rm -f "$EXP/out.tsv"
	rec "$1" export seconds "$t"
	echo "    $1 export ${t}s" >&2
}
[[ $ONLY == engine ]] || setup_export

echo "engine benchmark: $RECORDS records, $REPS repetitions, databases under $WORK" >&2
for ((rep = 1; rep <= REPS; rep++)); do
	widx=0
	if [[ $ONLY != engine ]]; then
		echo "rep $rep/$REPS, export of $RECORDS records:" >&2
		tools=(tc kc kura)
		for ((i = 0; i < 3; i++)); do
			run_export "${tools[$(((i + rep - 1) % 3))]}"
		done
	fi
	[[ $ONLY == export ]] && continue
	for w in "${WORKLOADS[@]}"; do
		IFS=: read -r wl t r <<<"$w"
		tools=(tc kc kura kura_order)
		[[ $wl == seq1 ]] && tools+=(kura_default)
		k=${#tools[@]}
		echo "rep $rep/$REPS, $wl ($t thread(s), $([[ $r == 1 ]] && echo random || echo sequential)):" >&2
		for ((i = 0; i < k; i++)); do
			tool=${tools[$(((i + rep - 1 + widx) % k))]}
			case $tool in
			tc) run_tc "$wl" "$t" "$r" ;;
			kc) run_kc "$wl" "$t" "$r" ;;
			kura) run_kura kura "$wl" "$t" "$r" "#sync=none" ;;
			kura_default) run_kura kura_default "$wl" "$t" "$r" "" ;;
			kura_order) run_kura_order "$wl" "$t" "$r" ;;
			esac
		done
		widx=$((widx + 1))
	done
done

[[ -n ${RAW:-} ]] && cp "$DATA" "$RAW" && echo "raw measurements: $RAW" >&2

# Medians and tables.
awk -F '\t' -v reps="$REPS" -v records="$RECORDS" '
function median(key,    n, i, j, v, a, tmp) {
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
function cnt(v) { return v == "" ? "-" : sprintf("%d", v) }
{ k = $1 SUBSEP $2 SUBSEP $3; vals[k] = (k in vals) ? vals[k] " " $4 : $4 }
END {
	if (("tc" SUBSEP "export" SUBSEP "seconds") in vals) {
		tc = median("tc" SUBSEP "export" SUBSEP "seconds")
		kc = median("kc" SUBSEP "export" SUBSEP "seconds")
		ku = median("kura" SUBSEP "export" SUBSEP "seconds")
		best = (tc < kc) ? tc : kc
		printf "\nExport: %d records to a TSV file, median of %d runs, seconds (wall clock, process start to exit).\n\n", records, reps
		printf "| %-28s | %8s | %10s |\n", "command", "seconds", "Kura/it"
		printf "|%s|%s|%s|\n", "------------------------------", "---------:", "-----------:"
		printf "| %-28s | %8s | %10s |\n", "tchmgr list -pv", sec(tc), ratio(ku, tc)
		printf "| %-28s | %8s | %10s |\n", "kchashmgr list -pv", sec(kc), ratio(ku, kc)
		printf "| %-28s | %8s | %10s |\n", "kura db export", sec(ku), ""
		printf "\nSpeed of kura db export against the faster peer (peer time / Kura time): %s\n", ratio(best, ku)
	}
	if (!(("tc" SUBSEP "seq1" SUBSEP "write") in vals)) exit
	nw = split("seq1 rnd1 seq2 rnd2", W, " ")
	desc["seq1"] = "1 thread, sequential"; desc["rnd1"] = "1 thread, random"
	desc["seq2"] = "2 threads, sequential"; desc["rnd2"] = "2 threads, random"
	printf "\nEngine: %d records (8-byte keys and values), median of %d runs, seconds (lower is better).\n", records, reps
	printf "Ratios are time ratios: below 1 means Kura is faster.\n"
	printf "TC = tchtest/tchmttest (open..close); Kura = kura-bench write/read on PATH.kh#sync=none (open..close).\n"
	printf "KC = kchashtest order phases; Kura order = kura-bench order on PATH.kh#sync=none, same phases.\n\n"
	printf "| %-24s | %-9s | %8s | %8s | %7s | %8s | %10s | %7s |\n", "workload", "phase", "TC", "Kura", "Kura/TC", "KC", "Kura order", "Kura/KC"
	printf "|%s|%s|%s|%s|%s|%s|%s|%s|\n", "--------------------------", "-----------", "---------:", "---------:", "--------:", "---------:", "-----------:", "--------:"
	for (i = 1; i <= nw; i++) {
		w = W[i]
		split("write read remove", P, " "); split("set get remove", Q, " ")
		for (p = 1; p <= 3; p++) {
			tc = (p < 3) ? median("tc" SUBSEP w SUBSEP P[p]) : ""
			ku = (p < 3) ? median("kura" SUBSEP w SUBSEP P[p]) : ""
			kc = median("kc" SUBSEP w SUBSEP Q[p])
			ko = median("kura_order" SUBSEP w SUBSEP Q[p])
			label = (p < 3) ? P[p] "/" Q[p] : "remove"
			printf "| %-24s | %-9s | %8s | %8s | %7s | %8s | %10s | %7s |\n", desc[w], label, sec(tc), sec(ku), ratio(ku, tc), sec(kc), sec(ko), ratio(ko, kc)
		}
	}
	for (p = 1; p <= 2; p++) {
		ph = (p == 1) ? "write" : "read"
		tc = median("tc" SUBSEP "seq1" SUBSEP ph); kd = median("kura_default" SUBSEP "seq1" SUBSEP ph)
		printf "| %-24s | %-9s | %8s | %8s | %7s | %8s | %10s | %7s |\n", "1 thr, seq, default sync", ph, sec(tc), sec(kd), ratio(kd, tc), "", "", ""
	}

	printf "\nFile size after writing (du -sb; records stored in brackets: tchtest/kchashtest -rnd draw keys with replacement).\n\n"
	printf "| %-24s | %22s | %22s | %22s | %22s |\n", "workload", "TC", "KC", "Kura sync=none", "Kura default sync"
	printf "|%s|%s|%s|%s|%s|\n", "--------------------------", "-----------------------:", "-----------------------:", "-----------------------:", "-----------------------:"
	for (i = 1; i <= nw; i++) {
		w = W[i]
		for (j = 1; j <= 4; j++) {
			tool = (j == 1) ? "tc" : (j == 2) ? "kc" : (j == 3) ? "kura" : "kura_default"
			s = median(tool SUBSEP w SUBSEP "size"); n = median(tool SUBSEP w SUBSEP "count")
			cell[j] = (s == "") ? "-" : mb(s) " (" cnt(n) ")"
		}
		printf "| %-24s | %22s | %22s | %22s | %22s |\n", desc[w], cell[1], cell[2], cell[3], cell[4]
	}

	printf "\n2 threads vs 1 thread: throughput ratio (time with 1 thread / time with 2 threads; above 1 = faster with 2).\n\n"
	printf "| %-22s | %6s | %6s | %6s | %10s |\n", "phase", "TC", "KC", "Kura", "Kura order"
	printf "|%s|%s|%s|%s|%s|\n", "------------------------", "-------:", "-------:", "-------:", "-----------:"
	split("seq rnd", O, " ")
	for (o = 1; o <= 2; o++) {
		for (p = 1; p <= 3; p++) {
			ph = P[p]; q = Q[p]
			a1 = O[o] "1"; a2 = O[o] "2"
			tc = (p < 3) ? ratio(median("tc" SUBSEP a1 SUBSEP ph), median("tc" SUBSEP a2 SUBSEP ph)) : "-"
			ku = (p < 3) ? ratio(median("kura" SUBSEP a1 SUBSEP ph), median("kura" SUBSEP a2 SUBSEP ph)) : "-"
			kc = ratio(median("kc" SUBSEP a1 SUBSEP q), median("kc" SUBSEP a2 SUBSEP q))
			ko = ratio(median("kura_order" SUBSEP a1 SUBSEP q), median("kura_order" SUBSEP a2 SUBSEP q))
			label = ((o == 1) ? "sequential " : "random ") ((p < 3) ? ph "/" q : "remove")
			printf "| %-22s | %6s | %6s | %6s | %10s |\n", label, tc, kc, ku, ko
		}
	}
}' "$DATA"
