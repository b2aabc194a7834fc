#!/usr/bin/env bash
# Recovery of this build against another build's, same run: `kura-bench reopen` of one .kh of
# RECORDS records (default 1,000,000) in three states, alternating between the two binaries,
# REPS times each (default 5), medians of the open time (kura-bench's own) and of the process's
# CPU time (user + sys, steadier on a loaded machine):
#   clean   the checkpoint (index.ki) loaded, nothing replayed;
#   full    no checkpoint: the whole log replayed (`--kill`: nothing is checkpointed);
#   tail    a crash 300 ms into writing 100,000 more records: their tail replayed (`--kill`).
# With CALLGRIND=1, also the instructions of one open and close in each state under valgrind's
# callgrind (exact, whatever else the machine runs; the close writes the checkpoint in full and
# tail, the same work for both builds).
#
# Usage: BASE=/path/to/other/kura-bench [REPS=5] [CALLGRIND=1] scripts/bench-reopen-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:?set BASE to the other build of kura-bench}
REPS=${REPS:-5} N=${RECORDS:-1000000}
cargo build --release -q -p kura-bench
THIS="$PWD/target/release/kura-bench"
WORK=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/kura-reopen.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

med() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
one() { # BIN DB EXPECTED [--kill]: "open-seconds cpu-seconds"
	local bin=$1 db=$2 n=$3
	shift 3
	local TIMEFORMAT='%U %S'
	{ time "$bin" reopen "$db" -n "$n" "$@" >"$WORK/out" 2>/dev/null || true; } 2>"$WORK/time"
	echo "$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' "$WORK/out" | head -1)" \
		"$(awk 'NR == 1 { printf "%.3f", $1 + $2 }' "$WORK/time")"
}
phase() { # NAME DB EXPECTED [--kill]
	local name=$1 db=$2 n=$3
	shift 3
	local bw=() bc=() tw=() tc=() r
	for _ in $(seq "$REPS"); do
		r=($(one "$BASE" "$db" "$n" "$@")) && bw+=("${r[0]}") && bc+=("${r[1]}")
		r=($(one "$THIS" "$db" "$n" "$@")) && tw+=("${r[0]}") && tc+=("${r[1]}")
	done
	printf '| %s | %s | %s | %s | %s |\n' "$name" "$(med "${bw[@]}")" "$(med "${tw[@]}")" \
		"$(med "${bc[@]}")" "$(med "${tc[@]}")"
}
ir() { # BIN DB EXPECTED: instructions of one open and close, on a copy
	rm -rf "$WORK/x.kh" && cp -r "$2" "$WORK/x.kh"
	valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" reopen "$WORK/x.kh" -n "$3" \
		2>&1 >/dev/null | sed -n 's/.*refs: *\([0-9,]*\).*/\1/p' | tr -d ,
}

"$BASE" grow "$WORK/c.kh" -n "$N" --report-every "$N" >/dev/null
cp -r "$WORK/c.kh" "$WORK/f.kh" && rm "$WORK/f.kh/index.ki"
cp -r "$WORK/c.kh" "$WORK/t.kh"
("$BASE" grow "$WORK/t.kh" --start "$N" -n 100000 --crash >/dev/null 2>&1) 2>/dev/null || true
T=$((N + 100000))
echo "| state | open s (base) | open s (this) | CPU s (base) | CPU s (this) |"
echo "|---|---|---|---|---|"
phase clean "$WORK/c.kh" "$N"
phase full "$WORK/f.kh" "$N" --kill
phase tail "$WORK/t.kh" "$T" --kill
if [ "${CALLGRIND:-0}" = 1 ]; then
	echo
	echo "| state | instructions (base) | instructions (this) |"
	echo "|---|---|---|"
	for s in "clean c.kh $N" "full f.kh $N" "tail t.kh $T"; do
		set -- $s
		echo "| $1 | $(ir "$BASE" "$WORK/$2" "$3") | $(ir "$THIS" "$WORK/$2" "$3") |"
	done
fi
