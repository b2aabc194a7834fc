#!/usr/bin/env bash
# Engine at scale: the scale properties asked of Kura's on-disk hash (`PATH.kh`), measured with
# `kura-bench grow`, `reopen` and `big` (see bench/src/scale.rs and docs/benchmarks/engine.md, "Engine at
# scale").
#
# Usage: scripts/bench-scale.sh            (from anywhere in the repository)
#
# Steps (each prints what it does; STEPS="grow open big size" picks some of them):
#   grow   REPS runs of `grow PATH.kh#bnum=HINT#sync=none -n RECORDS --report-every EVERY`:
#          insert rate of every interval; the rate at HINT/2 records against the rate at RECORDS
#          (10x the hint). Target: the rate at 10x is within 20 % of the rate at 0.5x.
#   open   One database of RECORDS records with default settings (`PATH.kh`):
#          - memory (VmRSS, VmHWM, RssAnon, RssFile) of the writing process after writing, after
#            reading every record back and after closing; then of a fresh process after opening
#            and after reading every record (target: well under 512 MB);
#          - clean reopen time, REPS times (target: well under 3 s);
#          - full rebuild: index.ki deleted, open timed REPS times, each process killed with
#            SIGKILL right after the open so that no checkpoint is written; then a clean open and
#            close writes the checkpoint again;
#          - crash recovery: write TAIL1 more records and SIGKILL the writer (no checkpoint), time
#            the reopen REPS times (each reopen killed too); then write up to TAIL2 more records,
#            SIGKILL, time the reopen REPS times. Target: recovery time proportional to the
#            un-checkpointed tail, not to the database;
#          - a last clean open verifies the count and VERIFY records.
#   big    `big PATH.kh#sync=none -n BIG_COUNT --value-size BIG_VALUE` (5000 x 1 MiB = 4.9 GiB by
#          default): write, close, reopen, verify the count and a sample; `du -sb`; deleted after.
#   size   `du -sb` of 1,000,000 records (kura-bench write, default settings) and of Tokyo
#          Cabinet's `tchtest write PATH 1000000` (and 10,000,000 when TC10M=1, the default;
#          needs tokyocabinet-bin). The 10,000,000-record Kura size comes from step `open`.
#
# Environment:
#   REPS=3 RECORDS=10000000 HINT=1000000 EVERY=500000 TAIL1=100000 TAIL2=1000000
#   VERIFY=100000 BIG_COUNT=5000 BIG_VALUE=1m TC10M=1
#   STEP_TIMEOUT=900      seconds allowed for any single command
#   BENCH_TMPDIR=...      where the databases go (default $TMPDIR or /tmp); removed afterwards
#   KURA_BENCH_BIN=...    use this kura-bench binary instead of building one
#
# Caches: every figure is with a warm page cache (the files were just written); the script
# never drops caches.

set -euo pipefail

REPS=${REPS:-3}
RECORDS=${RECORDS:-10000000}
HINT=${HINT:-1000000}
EVERY=${EVERY:-500000}
TAIL1=${TAIL1:-100000}
TAIL2=${TAIL2:-1000000}
VERIFY=${VERIFY:-100000}
BIG_COUNT=${BIG_COUNT:-5000}
BIG_VALUE=${BIG_VALUE:-1m}
TC10M=${TC10M:-1}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
STEPS=${STEPS:-grow open big size}
BENCH_TMPDIR=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}

die() {
	echo "bench-scale: $*" >&2
	exit 1
}
say() { echo "bench-scale: $*" >&2; }

for v in REPS RECORDS HINT EVERY TAIL1 TAIL2 BIG_COUNT STEP_TIMEOUT; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ $VERIFY =~ ^[0-9]+$ ]] || die "VERIFY must be a non-negative integer"
((TAIL2 > TAIL1)) || die "TAIL2 must be larger than TAIL1"
((HINT % 2 == 0)) || die "HINT must be even"
((HINT / 2 % EVERY == 0 && RECORDS % EVERY == 0)) ||
	die "EVERY must divide HINT/2 and RECORDS (the intervals must end at both)"
command -v timeout >/dev/null || die "timeout (coreutils) is needed"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [[ -n ${KURA_BENCH_BIN:-} ]]; then
	BIN=$KURA_BENCH_BIN
else
	say "building kura-bench: cargo build --release -p kura-bench"
	cargo build --release -q -p kura-bench
	BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/kura-bench
fi
[[ -x $BIN ]] || die "no $BIN after the build"

mkdir -p "$BENCH_TMPDIR"
WORK=$(mktemp -d "$BENCH_TMPDIR/kura-bench-scale.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
avail_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
say "databases under $WORK ($((avail_kb / 1024 / 1024)) GiB free)"

# Summary rows: "label<TAB>value<TAB>target / note".
SUMMARY=$WORK/summary.tsv
: >"$SUMMARY"
row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$SUMMARY"; }

# run OUTVAR CMD...: run under the step timeout, keep stdout, fail loudly with its tail.
run() {
	local __var=$1 __out
	shift
	say "  \$ ${*/#$BIN/kura-bench}"
	if ! __out=$(timeout "$STEP_TIMEOUT" "$@" 2>&1); then
		echo "bench-scale: FAILED: $*" >&2
		tail -n 20 <<<"$__out" >&2
		exit 1
	fi
	printf -v "$__var" '%s' "$__out"
}

# run_killed OUTVAR CMD...: the same for a command that ends by SIGKILL (exit status 137).
run_killed() {
	local __var=$1 __out __rc=0
	shift
	say "  \$ ${*/#$BIN/kura-bench}   (ends by SIGKILL)"
	__out=$(timeout "$STEP_TIMEOUT" "$@" 2>&1) || __rc=$?
	if ((__rc != 137)); then
		echo "bench-scale: expected death by SIGKILL (status 137), got $__rc: $*" >&2
		tail -n 20 <<<"$__out" >&2
		exit 1
	fi
	printf -v "$__var" '%s' "$__out"
}

# Field KEY of the first RESULT line starting with PREFIX ("op=reopen ", …).
field() { grep -m1 "^RESULT $2" <<<"$1" | tr ' ' '\n' | sed -n "s/^$3=//p"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
size_of() { du -sb "$1" | cut -f1; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
mibk() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
want_step() { [[ " $STEPS " == *" $1 "* ]]; }

# ----- grow: no cliff past the bnum hint -----------------------------------------------------
if want_step grow; then
	half=$((HINT / 2))
	say "step grow: $REPS runs of $RECORDS inserts into PATH.kh#bnum=$HINT#sync=none (1 thread," \
		"8-byte %08d keys, value = key); insert rate per $EVERY records"
	PROFILE=$WORK/profile.tsv
	: >"$PROFILE"
	r_half=() r_full=() ratios=() totals=()
	for ((rep = 1; rep <= REPS; rep++)); do
		dir=$(mktemp -d "$WORK/grow.XXXXXX")
		run out "$BIN" grow "$dir/x.kh#bnum=$HINT#sync=none" -n "$RECORDS" --report-every "$EVERY"
		a=$(field "$out" "op=grow records=$half " ops_per_sec)
		b=$(field "$out" "op=grow records=$RECORDS " ops_per_sec)
		t=$(field "$out" "op=grow_total " ops_per_sec)
		[[ -n $a && -n $b ]] || die "no interval rate at $half or $RECORDS records"
		grep '^RESULT op=grow records=' <<<"$out" | tr ' ' '\n' |
			awk -F= -v rep="$rep" '$1 == "records" { r = $2 } $1 == "ops_per_sec" { print rep "\t" r "\t" $2 }' >>"$PROFILE"
		ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
		r_half+=("$a") r_full+=("$b") ratios+=("$ratio") totals+=("$t")
		say "  run $rep: $a puts/s at $half records, $b puts/s at $RECORDS records: ratio $ratio (whole run $t puts/s)"
		rm -rf "$dir"
	done
	mh=$(median "${r_half[@]}") mf=$(median "${r_full[@]}") mr=$(median "${ratios[@]}")
	say "  insert rate per interval (median of $REPS runs), puts/s:"
	MEDPROF=$WORK/profile-median.tsv
	awk -F '\t' '{ v[$2] = ($2 in v) ? v[$2] " " $3 : $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
		END {
			for (i = 1; i <= n; i++) {
				m = split(v[order[i]], a, " ")
				for (x = 2; x <= m; x++) { t = a[x] + 0; for (y = x - 1; y >= 1 && a[y] + 0 > t; y--) a[y + 1] = a[y]; a[y + 1] = t }
				med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
				printf "%d\t%d\t%s\n", order[i], med, v[order[i]]
			}
		}' "$PROFILE" >"$MEDPROF"
	awk -F '\t' '{ printf "    %10d records: %9d   (runs: %s)\n", $1, $2, $3 }' "$MEDPROF" >&2
	slow=$(sort -t "$(printf '\t')" -k2,2n "$MEDPROF" | head -1)
	verdict=$(awk -v r="$mr" 'BEGIN { print (r >= 0.8) ? "PASS (>= 0.80)" : "MISS (target >= 0.80)" }')
	row "grow: rate at $half records (0.5x hint)" "$mh puts/s" "median of $REPS; runs ${r_half[*]}"
	row "grow: rate at $RECORDS records ($((RECORDS / HINT))x hint)" "$mf puts/s" "median of $REPS; runs ${r_full[*]}"
	row "grow: ratio 10x / 0.5x" "$mr" "$verdict; median of per-run ratios ${ratios[*]}"
	row "grow: whole run" "$(median "${totals[@]}") puts/s" "median of $REPS; runs ${totals[*]}"
	row "grow: slowest interval (median over runs)" "$(cut -f2 <<<"$slow") puts/s" \
		"the $EVERY records ending at $(cut -f1 <<<"$slow"); $(awk -v s="$(cut -f2 <<<"$slow")" -v h="$mh" 'BEGIN { printf "%.2f", s / h }')x the rate at 0.5x"
fi

# ----- open: memory, open time, rebuild, crash recovery ------------------------------------------
if want_step open; then
	dir=$(mktemp -d "$WORK/open.XXXXXX")
	db=$dir/x.kh
	say "step open: $RECORDS records into $db (default settings), read back, close"
	run out "$BIN" grow "$db" -n "$RECORDS" --report-every 1000000 --verify
	grep -E '^  (memory|read back|sync)' <<<"$out" >&2 || true
	# mem_row WHO PHASE: VmRSS / VmHWM, judged against 512 MiB.
	mem_row() {
		local rss hwm
		rss=$(field "$out" "op=memory phase=$2 " vm_rss_kb)
		hwm=$(field "$out" "op=memory phase=$2 " vm_hwm_kb)
		row "memory ($1) $2: VmRSS / VmHWM" "$(mibk "$rss") / $(mibk "$hwm")" \
			"anon $(mibk "$(field "$out" "op=memory phase=$2 " rss_anon_kb)"), file-backed $(mibk "$(field "$out" "op=memory phase=$2 " rss_file_kb)"); $(awk -v r="$rss" -v h="$hwm" 'BEGIN { printf "VmRSS %s 512 MiB, VmHWM %s 512 MiB", (r < 524288) ? "<" : ">=", (h < 524288) ? "<" : ">=" }')"
	}
	for ph in after_write after_read after_close; do
		mem_row writer "$ph"
	done
	KURA10M=$(size_of "$db")
	KURA10M_CKPT=$(stat -c %s "$db/index.ki")
	say "  du -sb: $KURA10M bytes (index.ki $KURA10M_CKPT bytes)"

	say "  fresh process: open, read every record, close"
	run out "$BIN" reopen "$db" -n "$RECORDS" --verify "$RECORDS"
	grep -E '^  (open|memory|verified)' <<<"$out" >&2 || true
	for ph in after_open after_read; do
		mem_row reader "$ph"
	done

	# reopen_times LABEL EXPECTED KILL: REPS timed opens; prints the median.
	reopen_times() {
		local label=$1 expect=$2 kill=$3 times=() t c i
		closes=()
		for ((i = 1; i <= REPS; i++)); do
			if ((kill)); then
				run_killed out "$BIN" reopen "$db" -n "$expect" --kill
			else
				run out "$BIN" reopen "$db" -n "$expect"
			fi
			t=$(field "$out" "op=reopen " seconds)
			((kill)) || closes+=("$(field "$out" "op=reopen_close " seconds)")
			c=$(field "$out" "op=reopen " count)
			[[ $c == "$expect" ]] || die "$label: reopen found $c records, expected $expect"
			times+=("$t")
		done
		say "  $label: open ${times[*]} s"
		OPEN_MEDIAN=$(median "${times[@]}")
		OPEN_RUNS="${times[*]}"
	}

	say "  clean reopen, $REPS times (open only; close is separate)"
	reopen_times "clean reopen" "$RECORDS" 0
	clean=$OPEN_MEDIAN
	row "open: clean reopen, $RECORDS records" "$clean s" \
		"$(awk -v t="$clean" 'BEGIN { print (t < 3) ? "PASS (< 3 s)" : "MISS (target < 3 s)" }'); median of $REPS; runs $OPEN_RUNS; then close $(median "${closes[@]}") s"

	say "  full rebuild: rm index.ki, open $REPS times (each killed after the open: no checkpoint)"
	rm -f "$db/index.ki"
	reopen_times "full rebuild" "$RECORDS" 1
	full=$OPEN_MEDIAN
	row "open: no checkpoint (full rebuild), $RECORDS records" "$full s" "median of $REPS; runs $OPEN_RUNS"
	say "  clean open and close to write the checkpoint again"
	run out "$BIN" reopen "$db" -n "$RECORDS"
	[[ -f $db/index.ki ]] || die "no index.ki after a clean close"
	ckpt_stamp=$(stat -c '%Y.%s' "$db/index.ki")

	say "  crash: add $TAIL1 records, SIGKILL after 300 ms (buffers handed to the OS every 50 ms)"
	run_killed out "$BIN" grow "$db" --start "$RECORDS" -n "$TAIL1" --report-every "$TAIL1" --crash
	reopen_times "after crash, tail $TAIL1" $((RECORDS + TAIL1)) 1
	tail1=$OPEN_MEDIAN
	row "open after crash: $RECORDS checkpointed + $TAIL1 not" "$tail1 s" "median of $REPS; runs $OPEN_RUNS"

	more=$((TAIL2 - TAIL1))
	say "  crash: add $more more records (tail now $TAIL2), SIGKILL"
	run_killed out "$BIN" grow "$db" --start $((RECORDS + TAIL1)) -n "$more" --report-every "$more" --crash
	reopen_times "after crash, tail $TAIL2" $((RECORDS + TAIL2)) 1
	tail2=$OPEN_MEDIAN
	row "open after crash: $RECORDS checkpointed + $TAIL2 not" "$tail2 s" "median of $REPS; runs $OPEN_RUNS"
	[[ $(stat -c '%Y.%s' "$db/index.ki") == "$ckpt_stamp" ]] ||
		say "  WARNING: index.ki changed during the crash steps: the tails were (partly) checkpointed"
	row "recovery: tail $TAIL1 / tail $TAIL2 / none checkpointed" \
		"$(awk -v a="$tail1" -v b="$tail2" -v c="$clean" -v f="$full" 'BEGIN { printf "%.3f / %.3f / %.3f s", a - c, b - c, f - c }')" \
		"open time minus the clean open time ($clean s)"

	say "  last clean open: count and $VERIFY records"
	run out "$BIN" reopen "$db" -n $((RECORDS + TAIL2)) --verify "$VERIFY"
	grep -E '^  (open|verified)' <<<"$out" >&2 || true
	rm -rf "$dir"
fi

# ----- big: one database beyond 4 GiB ----------------------------------------------------------
if want_step big; then
	dir=$(mktemp -d "$WORK/big.XXXXXX")
	say "step big: $BIG_COUNT values of $BIG_VALUE into $dir/x.kh#sync=none, close, reopen, verify"
	run out "$BIN" big "$dir/x.kh#sync=none" -n "$BIG_COUNT" --value-size "$BIG_VALUE"
	grep -E '^  (write|reopen)' <<<"$out" >&2 || true
	bsz=$(size_of "$dir/x.kh")
	nfiles=$(find "$dir/x.kh" -type f | wc -l)
	largest=$(find "$dir/x.kh" -type f -printf '%s\n' | sort -n | tail -1)
	say "  du -sb $bsz bytes in $nfiles files (largest $largest bytes)"
	row "big: write $BIG_COUNT x $BIG_VALUE (open..close)" "$(field "$out" "op=big_write " seconds) s" \
		"du -sb $bsz bytes ($(awk -v b="$bsz" 'BEGIN { printf "%.2f GiB", b / 2^30 }')); $nfiles files, largest $largest bytes"
	row "big: reopen" "$(field "$out" "op=big_reopen " seconds) s" \
		"count $(field "$out" "op=big_reopen " count), $(field "$out" "op=big_reopen " verified) values verified, $(field "$out" "op=big_reopen " misses) missing, $(field "$out" "op=big_reopen " bad) wrong"
	rm -rf "$dir"
	say "  deleted"
fi

# ----- size: bytes on disk ---------------------------------------------------------------------
if want_step size; then
	dir=$(mktemp -d "$WORK/size.XXXXXX")
	say "step size: 1000000 records (8-byte keys and values), Kura default settings and tchtest"
	run out "$BIN" write -n 1000000 "$dir/x.kh"
	row "size: Kura, 1000000 records" "$(mb "$(size_of "$dir/x.kh")")" \
		"du -sb; kura-bench write -n 1000000 PATH.kh; of which index.ki $(mb "$(stat -c %s "$dir/x.kh/index.ki")")"
	rm -rf "$dir/x.kh"
	if [[ -n ${KURA10M:-} ]]; then
		row "size: Kura, $RECORDS records" "$(mb "$KURA10M")" \
			"du -sb after step open's clean close; of which index.ki $(mb "$KURA10M_CKPT")"
	fi
	if command -v tchtest >/dev/null 2>&1; then
		run out tchtest write "$dir/c.tch" 1000000
		row "size: Tokyo Cabinet, 1000000 records" "$(mb "$(size_of "$dir/c.tch")")" "du -sb; tchtest write PATH 1000000"
		rm -f "$dir/c.tch"
		if ((TC10M)); then
			run out tchtest write "$dir/c.tch" 10000000
			row "size: Tokyo Cabinet, 10000000 records" "$(mb "$(size_of "$dir/c.tch")")" \
				"du -sb; tchtest write PATH 10000000 ($(awk '/^time:/ { t = $2 } END { print t }' <<<"$out") s)"
			rm -f "$dir/c.tch"
		fi
	else
		say "  tchtest missing (apt-get install -y tokyocabinet-bin): no Tokyo Cabinet sizes"
	fi
	rm -rf "$dir"
fi

# ----- summary ---------------------------------------------------------------------------------
echo
echo "Engine at scale: $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ), REPS=$REPS RECORDS=$RECORDS HINT=$HINT"
echo
awk -F '\t' '
	{ l[NR] = $1; v[NR] = $2; n[NR] = $3; if (length($1) > w1) w1 = length($1); if (length($2) > w2) w2 = length($2) }
	END {
		printf "| %-*s | %*s | %s |\n", w1, "measurement", w2, "value", "target / notes"
		printf "|%s|%s|%s|\n", sprintf("%*s", w1 + 2, "") , sprintf("%*s", w2 + 2, ""), "---"
		for (i = 1; i <= NR; i++) printf "| %-*s | %*s | %s |\n", w1, l[i], w2, v[i], n[i]
	}' "$SUMMARY" | sed '2s/ /-/g'
