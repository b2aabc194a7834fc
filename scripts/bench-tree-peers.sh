#!/usr/bin/env bash
# Ordered stores a Rust user would pick instead of a Kura B+ tree (issue 24): LMDB through heed
# (1,000 puts a transaction with NO_SYNC, and all in one transaction), redb (one transaction),
# fjall (defaults) and Kura by name, all driven by one binary, `ordered-peers` (bench/, built
# with `--features peers`), on RECORDS records with 8-byte `%08d` keys and values equal to the
# keys, in key order and shuffled (every key once, a fixed seed): write, then read in a fresh
# process, then a full ordered scan in another.
#
# Usage: scripts/bench-tree-peers.sh                   (from anywhere in the repository)
#        KURA_DB=+ scripts/bench-tree-peers.sh         (the in-memory tree instead)
#
# Environment:
#   KURA_DB=casket.kb  the Kura database name: a path inside each run's fresh directory, with a
#                      `.kb`'s parameters if wanted (`casket.kb#cache=64m`); a memory kind (`+`)
#                      is used as is (a fresh process starts empty, so read and scan store the
#                      records first, untimed)
#   REPS=3             repetitions; the tables show the median of each figure
#   RECORDS=1000000    records per run
#   STORES="lmdb-batch lmdb-one redb fjall kura"   which stores to run
#   SCAN=1             also time the full ordered scan (SCAN=0: write and read only)
#   RUN_TIMEOUT=600    seconds any single command may take before the script gives up
#   BENCH_TMPDIR=...   where the databases go (default $TMPDIR or /tmp); each run gets a fresh
#                      directory there, removed after the run
#   RAW=file           also keep every single measurement there (tab-separated)
#   PEERS_BIN=...      use this ordered-peers binary instead of building one
#
# Timing: each phase is its own process and is timed inside it from the open to the end of the
# close (RESULT "seconds"). LMDB NO_SYNC never fsyncs; LMDB in one transaction and redb fsync
# once, at their commit; fjall persists its journal when it is dropped and replays it on the next
# open; Kura syncs once after the puts and at close. File sizes are `du -sb` of the store's
# directory after the write (for a memory kind: the bytes Kura counts in memory).
#
# Stores are run in a rotating order for every workload and repetition, so that slow drifts of
# a shared machine do not always hit the same one.

set -euo pipefail

REPS=${REPS:-3}
RECORDS=${RECORDS:-1000000}
BENCH_TMPDIR=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
KURA_DB=${KURA_DB:-casket.kb}
STORES=${STORES:-lmdb-batch lmdb-one redb fjall kura}
SCAN=${SCAN:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}

die() {
	echo "bench-tree-peers: $*" >&2
	exit 1
}

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer"
[[ $RECORDS =~ ^[1-9][0-9]*$ ]] && ((RECORDS < 100000000)) || die "RECORDS must be a positive integer below 10^8"
[[ $RUN_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "RUN_TIMEOUT must be a positive integer"
[[ $SCAN == 0 || $SCAN == 1 ]] || die "SCAN must be 0 or 1"
read -r -a STORE_LIST <<<"$STORES"
((${#STORE_LIST[@]})) || die "STORES is empty"
for s in "${STORE_LIST[@]}"; do
	case $s in lmdb-batch | lmdb-one | redb | fjall | kura) ;; *) die "unknown store $s" ;; esac
done
command -v bc >/dev/null 2>&1 || die "bc is needed (apt-get install -y bc)"

kura_mem=0
[[ $KURA_DB == +* || $KURA_DB == \** ]] && kura_mem=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [[ -n ${PEERS_BIN:-} ]]; then
	BIN=$PEERS_BIN
else
	echo "building ordered-peers (release, --features peers)..." >&2
	cargo build --release -q -p kura-bench --features peers --bin ordered-peers
	BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/ordered-peers
fi
[[ -x $BIN ]] || die "no $BIN after the build"

WORK=$(mktemp -d "$BENCH_TMPDIR/kura-bench-peers.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/results.tsv
: >"$DATA"

rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$DATA"; }

run_cmd() {
	local __var=$1 __out
	shift
	if ! __out=$(timeout "$RUN_TIMEOUT" "$@" 2>&1); then
		echo "bench-tree-peers: FAILED (or over ${RUN_TIMEOUT}s): $*" >&2
		tail -n 20 <<<"$__out" >&2
		exit 1
	fi
	printf -v "$__var" '%s' "$__out"
}
kfield() { grep -m1 "^RESULT op=$2 " <<<"$1" | tr ' ' '\n' | sed -n "s/^$3=//p"; }

run_store() { # STORE ORDER(seq|rnd)
	local store=$1 wl=$2 dir path out tw tr ts="" sz rflag=()
	[[ $wl == rnd ]] && rflag=(--rnd)
	dir=$(mktemp -d "$WORK/run.XXXXXX")
	if [[ $store == kura ]]; then
		if ((kura_mem)); then path=$KURA_DB; else path=$dir/$KURA_DB; fi
	else
		path=$dir/db
	fi
	run_cmd out "$BIN" write "$store" "$path" -n "$RECORDS" "${rflag[@]}"
	tw=$(kfield "$out" write seconds)
	if [[ $store == kura ]] && ((kura_mem)); then
		sz=$(kfield "$out" write file_size)
	elif [[ $store == kura ]]; then
		sz=$(du -sb "$dir/${KURA_DB%%#*}" | cut -f1)
	else
		sz=$(du -sb "$path" | cut -f1)
	fi
	run_cmd out "$BIN" read "$store" "$path" -n "$RECORDS" "${rflag[@]}"
	tr=$(kfield "$out" read seconds)
	if ((SCAN)); then
		run_cmd out "$BIN" scan "$store" "$path" -n "$RECORDS" "${rflag[@]}"
		ts=$(kfield "$out" scan seconds)
		rec "$store" "$wl" scan "$ts"
	fi
	rm -rf "$dir"
	rec "$store" "$wl" write "$tw"
	rec "$store" "$wl" read "$tr"
	rec "$store" "$wl" size "$sz"
	printf '    %-10s write %ss read %ss%s size %s\n' "$store" "$tw" "$tr" "${ts:+ scan ${ts}s}" "$sz" >&2
}

echo "ordered stores: Kura database '$KURA_DB', $RECORDS records, $REPS repetitions, under $WORK" \
	"(a shared machine: $(nproc) cores)" >&2
for ((rep = 1; rep <= REPS; rep++)); do
	widx=0
	for wl in seq rnd; do
		echo "rep $rep/$REPS, keys $([[ $wl == rnd ]] && echo shuffled || echo "in order"):" >&2
		k=${#STORE_LIST[@]}
		for ((i = 0; i < k; i++)); do
			run_store "${STORE_LIST[$(((i + rep - 1 + widx) % k))]}" "$wl"
		done
		widx=$((widx + 1))
	done
done

[[ -n ${RAW:-} ]] && cp "$DATA" "$RAW" && echo "raw measurements: $RAW" >&2

awk -F '\t' -v reps="$REPS" -v records="$RECORDS" -v kdb="$KURA_DB" -v kmem="$kura_mem" \
	-v stores="$STORES" -v scan="$SCAN" '
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
function sec(v) { return v == "" ? "-" : sprintf("%.3f", v) }
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "-" : sprintf("%.2f", a / b) }
function mb(v) { return v == "" ? "-" : sprintf("%.1f MB", v / 1e6) }
{ k = $1 SUBSEP $2 SUBSEP $3; vals[k] = (k in vals) ? vals[k] " " $4 : $4 }
END {
	ns = split(stores, S, " ")
	label["lmdb-batch"] = "LMDB (heed), 1,000 puts/txn, NO_SYNC"
	label["lmdb-one"] = "LMDB (heed), one transaction"
	label["redb"] = "redb, one transaction"
	label["fjall"] = "fjall, defaults"
	label["kura"] = "Kura " kdb
	printf "\nOrdered stores in Rust: %d records (8-byte keys and values), median of %d runs, seconds, open to close,\n", records, reps
	printf "each phase its own process (lower is better). Kura/it: Kura'"'"'s time / its time (below 1: Kura faster).\n\n"
	printf "| %-38s | %8s | %8s |%s %8s | %8s |%s %9s | %9s | %13s | %13s |\n", "store", "write", "read", (scan ? sprintf(" %8s |", "scan") : ""), \
		"write rnd", "read rnd", (scan ? sprintf(" %8s |", "scan rnd") : ""), "size", "size rnd", "Kura/it w, r", "Kura/it w, r rnd"
	printf "|%s|%s|%s|%s%s|%s|%s%s|%s|%s|%s|\n", "----------------------------------------", "---------:", "---------:", (scan ? "---------:|" : ""), \
		"---------:", "---------:", (scan ? "---------:|" : ""), "----------:", "----------:", "--------------:", "--------------:"
	for (i = 1; i <= ns; i++) {
		s = S[i]
		row = sprintf("| %-38s | %8s | %8s |", label[s], sec(median(s SUBSEP "seq" SUBSEP "write")), sec(median(s SUBSEP "seq" SUBSEP "read")))
		if (scan) row = row sprintf(" %8s |", sec(median(s SUBSEP "seq" SUBSEP "scan")))
		row = row sprintf(" %8s | %8s |", sec(median(s SUBSEP "rnd" SUBSEP "write")), sec(median(s SUBSEP "rnd" SUBSEP "read")))
		if (scan) row = row sprintf(" %8s |", sec(median(s SUBSEP "rnd" SUBSEP "scan")))
		sz = median(s SUBSEP "seq" SUBSEP "size"); szr = median(s SUBSEP "rnd" SUBSEP "size")
		if (s == "kura" && kmem) { szs = "(memory)"; szrs = "(memory)" } else { szs = mb(sz); szrs = mb(szr) }
		if (s == "kura") { rs = ""; rr = "" } else {
			rs = ratio(median("kura" SUBSEP "seq" SUBSEP "write"), median(s SUBSEP "seq" SUBSEP "write")) ", " ratio(median("kura" SUBSEP "seq" SUBSEP "read"), median(s SUBSEP "seq" SUBSEP "read"))
			rr = ratio(median("kura" SUBSEP "rnd" SUBSEP "write"), median(s SUBSEP "rnd" SUBSEP "write")) ", " ratio(median("kura" SUBSEP "rnd" SUBSEP "read"), median(s SUBSEP "rnd" SUBSEP "read"))
		}
		printf "%s %9s | %9s | %13s | %13s |\n", row, szs, szrs, rs, rr
	}
	if (("kura" SUBSEP "seq" SUBSEP "write") in vals && ("lmdb-batch" SUBSEP "seq" SUBSEP "read") in vals) {
		printf "\nTargets (issue 24): writes faster than each store (Kura/it below 1 in both write columns); reads within 1.2x of LMDB:\n"
		printf "Kura read / LMDB 1,000-puts read: %s in order, %s shuffled (target <= 1.20).\n", \
			ratio(median("kura" SUBSEP "seq" SUBSEP "read"), median("lmdb-batch" SUBSEP "seq" SUBSEP "read")), \
			ratio(median("kura" SUBSEP "rnd" SUBSEP "read"), median("lmdb-batch" SUBSEP "rnd" SUBSEP "read"))
	}
}' "$DATA"
