#!/usr/bin/env bash
# A/B of two kura-bench builds on the write workload (1M sequential 8-byte records, sync=none):
#   scripts/ab-write.sh A B [N] [THREADS]
# runs `A write -t THREADS` then `B write -t THREADS`, N times (default 9), each into a fresh
# directory under BENCH_TMPDIR (default /tmp), and prints, per binary, the median of the put
# phase (`put_seconds`) and of the whole run (open to close, `seconds`), then every put phase.
set -euo pipefail
(($# >= 2)) || { echo "usage: $0 A B [N] [THREADS]" >&2; exit 2; }
A=$1 B=$2 N=${3:-9} T=${4:-1}
for bin in "$A" "$B"; do [[ -x $bin ]] || { echo "$0: $bin is not executable" >&2; exit 2; }; done
WORK=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/kura-ab-write.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/results
: >"$OUT"
for ((i = 0; i < N; i++)); do
	for bin in "$A" "$B"; do
		rm -rf "$WORK/db" && mkdir "$WORK/db"
		line=$(timeout 300 "$bin" write -t "$T" "$WORK/db/c.kh#sync=none" | grep '^RESULT op=write ') ||
			{ echo "$0: $bin write failed" >&2; exit 1; }
		printf '%s\t%s\n' "$bin" "$line" >>"$OUT"
	done
done
for bin in "$A" "$B"; do
	grep -F "$bin	" "$OUT" | awk -v bin="$bin" '
		{ for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "put_seconds") p[NR] = kv[2]; if (kv[1] == "seconds") w[NR] = kv[2] } n = NR }
		function median(a, n,   i, j, t, b) { for (i = 1; i <= n; i++) b[i] = a[i]
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
			return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
		END { printf "%s: put median %.4f s, whole median %.4f s; puts:", bin, median(p, n), median(w, n)
			for (i = 1; i <= n; i++) printf " %s", p[i]; print "" }'
done
