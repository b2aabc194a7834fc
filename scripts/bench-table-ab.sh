#!/usr/bin/env bash
# Two builds of the table kind side by side, Kura only, alternating: `table-bench` of build A
# and of build B (bench/src/bin/table_bench.rs) on N of tcttest's records. Per repetition and
# build: write without indexes, read, write with five indexes (psntf), read; each with its
# time, peak RSS, `du -sb` size and the live leaf images (the sum of the image lengths the
# checkpoint `tree.ki` lists: what the file holds without the dead images of the node log).
# Then one six-index database (psntfx) per build, its size per index keyspace, and the query
# shapes of `bench-table.sh` (`search -r 10`), alternating.
#
# Usage: A=path/to/table-bench B=path/to/table-bench [N=1000000] [REPS=3] scripts/bench-table-ab.sh
# (build A at another commit in a worktree of its own: cargo build --release -p kura-bench
# --bin table-bench, then copy target/release/table-bench aside).
set -euo pipefail
N=${N:-1000000}
REPS=${REPS:-3}
[[ -x ${A:-} && -x ${B:-} ]] || { echo "set A and B to two table-bench binaries" >&2; exit 1; }
D=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/kura-table-ab.XXXXXX")
trap 'rm -rf "$D"' EXIT
secs() { grep -m1 '^RESULT' | tr ' ' '\n' | sed -n 's/^seconds=//p'; }
# live DB: the live image bytes per keyspace of a closed database, from its tree.ki.
live() {
	python3 - "$1/tree.ki" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
def varint(p):
    x = s = 0
    while True:
        c = b[p]; p += 1; x |= (c & 0x7f) << s; s += 7
        if c < 0x80: return x, p
def leaves(p, n):
    recs = byts = 0
    for i in range(n):
        if i:
            _, p = varint(p); ln, p = varint(p); p += ln
        for _ in range(2): _, p = varint(p)
        rl, p = varint(p); r, p = varint(p); recs += r; byts += rl
    return p, recs, byts
n = struct.unpack_from('<Q', b, 60)[0]
p, r, by = leaves(68, n)
out = [("records", n, r, by)]
k, p = varint(p)
for _ in range(k):
    _, p = varint(p); nl, p = varint(p); name = b[p:p + nl].decode(); p += nl
    pl, p = varint(p); p += pl; n, p = varint(p)
    p, r, by = leaves(p, n); out.append((name, n, r, by))
for name, n, r, by in out: print(f"{name} leaves={n} entries={r} bytes={by}")
print(f"total bytes={sum(o[3] for o in out)}")
PY
}
for ((rep = 1; rep <= REPS; rep++)); do
	order="A B"
	((rep % 2)) || order="B A"
	for w in $order; do
		bin=${!w}
		rm -rf "$D/w.kt"
		t0=$(/usr/bin/time -f %M -o "$D/rss" "$bin" write -n "$N" "$D/w.kt" | secs)
		r0=$(cat "$D/rss") s0=$(du -sb "$D/w.kt" | cut -f1)
		rd0=$("$bin" read "$D/w.kt" | secs)
		rm -rf "$D/w.kt"
		t5=$(/usr/bin/time -f %M -o "$D/rss" "$bin" write -n "$N" -i psntf "$D/w.kt" | secs)
		r5=$(cat "$D/rss") s5=$(du -sb "$D/w.kt" | cut -f1)
		l5=$(live "$D/w.kt" | sed -n 's/^total bytes=//p')
		rd5=$("$bin" read "$D/w.kt" | secs)
		echo "rep=$rep build=$w write0=$t0 rss0_kb=$r0 size0=$s0 read0=$rd0" \
			"write5=$t5 rss5_kb=$r5 size5=$s5 live5=$l5 read5=$rd5 load=$(cut -d' ' -f1 /proc/loadavg)"
	done
done
for w in A B; do
	bin=${!w}
	t6=$("$bin" write -n "$N" -i psntfx "$D/$w.kt" | secs)
	echo "build=$w write6=$t6 size6=$(du -sb "$D/$w.kt" | cut -f1)"
	live "$D/$w.kt" | sed "s/^/  build=$w /"
done
for ((rep = 1; rep <= REPS; rep++)); do
	for s in eq range fts order strinc; do
		for w in A B; do
			echo "rep=$rep build=$w shape=$s $(${!w} search -r 10 "$D/$w.kt" "$s" | grep '^RESULT')"
		done
	done
done
