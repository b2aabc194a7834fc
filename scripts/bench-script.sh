#!/usr/bin/env bash
# Scripts inside the server against a plain write, on one `kura serve --ext f.lua --scr g.lua`:
#   put  Tokyo Tyrant's binary `put` (the baseline);
#   ext  Tyrant's `ext` (0xC8 0x68) with the record lock, calling `incr`: one `_get`, one `_put`
#        (an atomic increment with a rule: the counter wraps to 0 past a ceiling);
#   scr  Kyoto Tycoon's binary play_script (0xB4) calling `incr`: one `db:get`, one `db:set`,
#        the same rule.
# The same connection count, threads and pipeline depth for all three; keys `00000042` drawn from
# KEYS, N requests a run; each database kind (DBS: `mem` = `*`, `kh` = an on-disk hash) gets a
# fresh server per repetition, the three workloads in a rotating order; medians of REPS runs and
# the ratios script / put (target: at least 0.7).
# Tokyo Tyrant's own `ttserver -ext` is not measured: no package registry reachable here ships
# Tokyo Tyrant (Debian dropped it; PyPI and npm carry clients only), so its rate cannot be taken
# on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} N=${N:-100000} KEYS=${KEYS:-10000}
THREADS=${THREADS:-2} CONNS=${CONNS:-8} PIPELINE=${PIPELINE:-1}
DBS=${DBS:-"mem kh"}
cargo build --release -q -p kura
KURA="$PWD/target/release/kura"
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

cat >"$WORK/f.lua" <<'LUA'
-- Tyrant: an atomic increment with a rule (called with the record lock).
function incr(key, value)
  local cur = _get(key)
  local n = (tonumber(cur) or 0) + (tonumber(value) or 1)
  if n > 1000000000 then n = 0 end
  if not _put(key, tostring(n)) then return nil end
  return tostring(n)
end
LUA
cat >"$WORK/g.lua" <<'LUA'
-- Kyoto Tycoon: the same increment over the kt.db methods.
kt = __kyototycoon__
db = kt.db
function incr(inmap, outmap)
  local key = inmap.key
  local cur = db:get(key) -- the value (and its expiration time, not wanted here)
  local n = (tonumber(cur) or 0) + (tonumber(inmap.value) or 1)
  if n > 1000000000 then n = 0 end
  if not db:set(key, tostring(n)) then return kt.RVEINTERNAL end
  outmap.value = tostring(n)
  return kt.RVSUCCESS
end
LUA

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # a fresh server on database kind $1; sets PORT and PID
	PORT=$(free_port)
	local name="$WORK/s$PORT.kh"
	[ "$1" = mem ] && name='*'
	"$KURA" serve "$name" --port "$PORT" --threads "$THREADS" \
		--ext "$WORK/f.lua" --scr "$WORK/g.lua" 2>"$WORK/serve.log" &
	PID=$!
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.05; done
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }

run() { # workload $1 against the server on PORT; prints ops/s
	local proto
	case $1 in put) proto=tyrant ;; ext) proto=tyrant-ext ;; scr) proto=kt-script ;; esac
	local line
	line=$("$KURA" bench --port "$PORT" --protocol "$proto" --script incr --ext-opts 1 \
		--connections "$CONNS" --threads "$THREADS" --pipeline "$PIPELINE" \
		--key-size 8 --value-size 1 --keyspace "$KEYS" --requests "$N" --ratio 0:1 |
		grep '^RESULT') || { echo "bench $1 failed (see $WORK/serve.log):" >&2; cat "$WORK/serve.log" >&2; exit 1; }
	sed -n 's/.* ops_per_sec=\([0-9]*\).*/\1/p' <<<"$line"
}

RAW="$WORK/raw"
orders=("put ext scr" "ext scr put" "scr put ext")
for rep in $(seq "$REPS"); do
	for db in $DBS; do
		start "$db"
		for w in ${orders[$(((rep - 1) % 3))]}; do
			ops=$(run "$w")
			echo "$db $w $ops" >>"$RAW"
			echo "rep $rep: $db $w: $ops ops/s" >&2
		done
		stop
	done
done

printf '\nmedians of %s runs; %s requests a run over %s keys; %s connections, %s client and server threads, pipeline %s\n\n' \
	"$REPS" "$N" "$KEYS" "$CONNS" "$THREADS" "$PIPELINE"
printf '| database | put ops/s | ext ops/s | play_script ops/s | ext / put | play_script / put |\n'
printf '|---|---:|---:|---:|---:|---:|\n'
awk '
	function med(k,   n, i, j, t, a) { n = c[k]; for (i = 1; i <= n; i++) a[i] = v[k, i]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((n + 1) / 2)] }
	{ if (!($1 in seen)) { seen[$1] = 1; dbs[++nd] = $1 } k = $1 " " $2; v[k, ++c[k]] = $3 }
	END { for (i = 1; i <= nd; i++) { d = dbs[i]; p = med(d " put"); e = med(d " ext"); s = med(d " scr")
		printf "| %s | %d | %d | %d | %.2f | %.2f |\n", d, p, e, s, e / (p ? p : 1), s / (p ? p : 1) } }' "$RAW"
