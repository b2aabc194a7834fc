#!/usr/bin/env bash
# This build's engine against another build's, same run: `kura-bench` workloads alternating
# between the two binaries (which one goes first alternates too), REPS times each, medians.
#
# Usage: BASE=/path/to/other/kura-bench [EXT=kb] [SYNC=always] scripts/bench-ab.sh
# Workloads (RECORDS=1000000 by default): write in order, read in order, write shuffled, read
# shuffled (one thread), write with 2 threads, and `order` (write, read, remove in one open),
# each into a fresh directory (reads read what the same build's write just wrote). SYNC is the
# databases' sync mode (default none; with always, every write waits for its fdatasync: take
# RECORDS in the thousands).
set -euo pipefail
EXT=${EXT:-kh}  # the kind: kh (the hash), kb (the B+ tree) or kf (fixed-length)
SYNC=${SYNC:-none}
cd "$(dirname "$0")/.."
BASE=${BASE:?set BASE to the other build of kura-bench}
REPS=${REPS:-5} RECORDS=${RECORDS:-1000000}
cargo build --release -q -p kura-bench
THIS="$PWD/target/release/kura-bench"
WORK=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/kura-ab.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RAW="$WORK/raw"

secs() { sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' | head -1; }

run() { # BIN LABEL REP: every workload once
	local bin=$1 label=$2 rep=$3
	local d="$WORK/$label-$rep"
	rm -rf "$d" && mkdir -p "$d"
	echo "$label write $("$bin" write "$d/s.${EXT}#sync=$SYNC" -n "$RECORDS" | secs)" >>"$RAW"
	echo "$label read $("$bin" read "$d/s.${EXT}#sync=$SYNC" -n "$RECORDS" | secs)" >>"$RAW"
	echo "$label write-rnd $("$bin" write "$d/r.${EXT}#sync=$SYNC" -n "$RECORDS" --rnd | secs)" >>"$RAW"
	echo "$label read-rnd $("$bin" read "$d/r.${EXT}#sync=$SYNC" -n "$RECORDS" --rnd | secs)" >>"$RAW"
	echo "$label write-2t $("$bin" write "$d/t.${EXT}#sync=$SYNC" -n "$RECORDS" -t 2 | secs)" >>"$RAW"
	echo "$label order $("$bin" order "$d/o.${EXT}#sync=$SYNC" -n "$RECORDS" | grep 'op=order' | secs)" >>"$RAW"
	rm -rf "$d"
}

for rep in $(seq "$REPS"); do
	if ((rep % 2)); then
		run "$BASE" base "$rep"; run "$THIS" this "$rep"
	else
		run "$THIS" this "$rep"; run "$BASE" base "$rep"
	fi
	echo "rep $rep done" >&2
done
printf '\nmedians of %s runs, %s records, sync=%s, seconds (whole process, open to close)\n\n' "$REPS" "$RECORDS" "$SYNC"
printf '| workload | base | this | this / base |\n|---|---:|---:|---:|\n'
awk '
	function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
	{ k = $2; w[k] = 1; n[$1, k]++; v[$1, k, n[$1, k]] = $3 }
	END {
		split("write read write-rnd read-rnd write-2t order", W, " ")
		for (i = 1; i <= 6; i++) { k = W[i]
			for (s = 0; s < 2; s++) { who = s ? "this" : "base"; c = n[who, k]; delete a
				for (j = 1; j <= c; j++) a[j] = v[who, k, j]
				m[who] = med(a, c) }
			printf "| %s | %.3f | %.3f | %.2f |\n", k, m["base"], m["this"], m["this"] / (m["base"] ? m["base"] : 1)
		}
	}' "$RAW"
