#!/usr/bin/env bash
# Kura's server against memcached, in one run, alternating, REPS repetitions, medians.
# Servers: memcached (Debian package, -t THREADS), `kura serve '*'`, `kura serve P.kh` (default
# sync) and `kura serve 'P.kh#sync=always'`, each with THREADS worker threads.
# Workloads (100-byte keys, 400-byte values, CONNS connections, key space 10,000 preloaded):
# get only, 90:10, 50:50, set only; text and binary protocol; no pipelining and PIPELINE deep.
# VSIZE and KEYSPACE change the value size and the key space (large values: VSIZE=65536
# KEYSPACE=256 CONNS=32 RATIOS=1:0 DEPTHS=1).
# Every run lasts SECS seconds (bounded). Prints medians, ratios to memcached and p99s.
# KURA_BASE=PATH/kura adds that build's server of each of kura-mem, kura-kh and kura-kb run
# (base-mem, base-kh, base-kb) to the same run and prints a second table: this build against
# it (before/after a change).
# `kura serve P.kb` (the on-disk B+ tree, default tuning) runs too (kura-kb); the `.kb / .kh`
# column is its throughput over the `.kh`'s (issue 24's target: 0.8 or more).
# SERVERS="kura-kh kura-kb" runs only those (any of memcached kura-mem kura-kh kura-always kura-kb;
# KURA_BASE adds their base servers); a column of a server not run shows 0 and its ratios "-".
# PROTOS may add tyrant (Tokyo Tyrant binary get/put; memcached does not speak it: its runs are
# skipped). SCRAPE=1 scrapes every server of this build (kura-*) at GET /metrics once a second
# for the whole run, as Prometheus would (the cost of metrics: compare with SCRAPE=0, and with
# KURA_BASE a build without them). SERVERS may add kura-tls: `kura serve '*' --tls-only` with a
# certificate made here (openssl), loaded over TLS by `kura bench --tls-ca`; a third table sets
# it beside kura-mem (the same server in plain). Each `kura bench` is killed after SECS+30
# seconds; servers listen on 127.0.0.1 only and are stopped by their pids at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3} SECS=${SECS:-2} THREADS=${THREADS:-2} CONNS=${CONNS:-128} PIPELINE=${PIPELINE:-16}
VSIZE=${VSIZE:-400} KEYSPACE=${KEYSPACE:-10000}
RATIOS=${RATIOS:-"1:0 9:1 1:1 0:1"} PROTOS=${PROTOS:-"text binary"} DEPTHS=${DEPTHS:-"1 $PIPELINE"}
command -v memcached >/dev/null || { echo "need memcached: apt-get install -y memcached" >&2; exit 1; }
cargo build --release -q -p kura
KURA="$PWD/target/release/kura"
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

tls_certs() { # a CA and a server certificate for 127.0.0.1 in $WORK (once)
	[ -f "$WORK/tls.pem" ] && return
	(cd "$WORK" &&
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca &&
		openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj /CN=127.0.0.1 &&
		printf 'subjectAltName=IP:127.0.0.1\n' >tls.ext &&
		openssl x509 -req -in tls.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out tls.pem -days 2 -extfile tls.ext) >/dev/null 2>&1
}

start() { # NAME: start it, record its port in PORT[NAME] and its pid in PIDS
	local name=$1 port
	port=$(free_port)
	case $name in
	memcached) memcached -u root -l 127.0.0.1 -p "$port" -t "$THREADS" -U 0 -m 2048 -c 4096 & ;;
	kura-mem) "$KURA" serve '*' --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	kura-kh) "$KURA" serve "$WORK/d$port.kh" --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	kura-always) "$KURA" serve "$WORK/a$port.kh#sync=always" --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	kura-kb) "$KURA" serve "$WORK/t$port.kb" --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	base-mem) "$KURA_BASE" serve '*' --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	base-kh) "$KURA_BASE" serve "$WORK/b$port.kh" --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	kura-tls) tls_certs; "$KURA" serve '*' --host 127.0.0.1 --port "$port" --threads "$THREADS" --tls-only \
		--tls-cert "$WORK/tls.pem" --tls-key "$WORK/tls.key" 2>/dev/null & ;;
	base-kb) "$KURA_BASE" serve "$WORK/c$port.kb" --host 127.0.0.1 --port "$port" --threads "$THREADS" 2>/dev/null & ;;
	*) echo "unknown server $name" >&2; exit 1 ;;
	esac
	PIDS+=($!)
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
	PORT[$name]=$port
}

# Before each run, wait (at most 5 s) until no server is still busy with the previous run's
# aftermath (a Kura server compacting what a write-heavy run left, say): otherwise that work
# shares the two cores with whichever server is measured next, memcached included.
cpu_ticks() { local t=0 p; for p in "${PIDS[@]}"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo "$t"; }
settle() {
	local before after
	for _ in $(seq 25); do
		before=$(cpu_ticks); sleep 0.2; after=$(cpu_ticks)
		((after - before <= 1)) && return
	done
}

SERVERS=${SERVERS:-"memcached kura-mem kura-kh kura-always kura-kb"}
if [ -n "${KURA_BASE:-}" ]; then
	for s in kura-mem kura-kh kura-kb; do [[ " $SERVERS " == *" $s "* ]] && SERVERS="$SERVERS base-${s#kura-}"; done
fi
declare -A PORT
for s in $SERVERS; do start "$s"; done
if [ "${SCRAPE:-0}" = 1 ]; then
	scrape_ports=""
	for s in $SERVERS; do [[ $s == kura-* ]] && scrape_ports="$scrape_ports ${PORT[$s]}"; done
	( while :; do
		for p in $scrape_ports; do curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$p/metrics" || true; done
		sleep 1
	done ) &
	PIDS+=($!)
fi
RAW="$WORK/raw"
for rep in $(seq "$REPS"); do
	for proto in $PROTOS; do for depth in $DEPTHS; do for ratio in $RATIOS; do
		# Alternate which server goes first.
		order=$SERVERS; ((rep % 2 == 0)) && order=$(echo "$SERVERS" | tr ' ' '\n' | tac | tr '\n' ' ')
		for s in $order; do
			[[ $proto == tyrant && $s == memcached ]] && continue
			settle
			tls=(); [[ $s == kura-tls ]] && tls=(--tls-ca "$WORK/ca.pem")
			line=$(timeout $((SECS + 30)) "$KURA" bench --port "${PORT[$s]}" "${tls[@]}" --protocol "$proto" --connections "$CONNS" \
				--threads "$THREADS" --pipeline "$depth" --ratio "$ratio" --duration "$SECS" --preload \
				--key-size 100 --value-size "$VSIZE" --keyspace "$KEYSPACE" | grep '^RESULT' || echo "RESULT failed")
			ops=$(sed -n 's/.* ops_per_sec=\([0-9]*\).*/\1/p' <<<"$line"); p99=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$line")
			echo "$proto $depth $ratio $s ${ops:-0} ${p99:-0}" >>"$RAW"
			echo "rep $rep: $proto depth=$depth ratio=$ratio $s: ${ops:-?} ops/s p99 ${p99:-?} us" >&2
		done
	done; done; done
done
printf '\nmedians of %s runs of %ss; %s connections, %s client and %s server threads; %s-byte values, %s keys\n\n' \
	"$REPS" "$SECS" "$CONNS" "$THREADS" "$THREADS" "$VSIZE" "$KEYSPACE"
printf '| protocol | pipeline | get:set | memcached ops/s | Kura * | Kura .kh | Kura .kh sync=always | Kura .kb | * / mc | .kh / mc | always / .kh | .kb / .kh | p99 µs mc / * / .kh / always / .kb |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n'
sort -k1,1 -k2,2n -k3,3 "$RAW" | awk '
	function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
	function r(x, y) { return (x && y) ? sprintf("%.2f", x / y) : "-" }
	{ k = $1 " " $2 " " $3; keys[k] = 1; n[k, $4]++; o[k, $4, n[k, $4]] = $5; l[k, $4, n[k, $4]] = $6 }
	END {
		split("memcached kura-mem kura-kh kura-always kura-kb", S, " ")
		for (k in keys) {
			for (i = 1; i <= 5; i++) { s = S[i]; c = n[k, s]; delete a; delete b
				for (j = 1; j <= c; j++) { a[j] = o[k, s, j]; b[j] = l[k, s, j] }
				m[s] = c ? med(a, c) : 0; q[s] = c ? med(b, c) : 0 }
			split(k, f, " ")
			printf "| %s | %s | %s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %d / %d / %d / %d / %d |\n", f[1], f[2], f[3], m["memcached"], m["kura-mem"], m["kura-kh"], m["kura-always"], m["kura-kb"], r(m["kura-mem"], m["memcached"]), r(m["kura-kh"], m["memcached"]), r(m["kura-always"], m["kura-kh"]), r(m["kura-kb"], m["kura-kh"]), q["memcached"], q["kura-mem"], q["kura-kh"], q["kura-always"], q["kura-kb"]
		}
	}' | sort
if [ -n "${KURA_BASE:-}" ]; then
	printf '\nthis build against %s, same run (medians)\n\n' "$KURA_BASE"
	printf '| protocol | pipeline | get:set | base * | this * | this / base | base .kh | this .kh | this / base | base .kb | this .kb | this / base |\n'
	printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
	sort -k1,1 -k2,2n -k3,3 "$RAW" | awk '
		function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
		function r(x, y) { return (x && y) ? sprintf("%.2f", x / y) : "-" }
		{ k = $1 " " $2 " " $3; keys[k] = 1; n[k, $4]++; o[k, $4, n[k, $4]] = $5 }
		END {
			split("kura-mem kura-kh kura-kb base-mem base-kh base-kb", S, " ")
			for (k in keys) {
				for (i = 1; i <= 6; i++) { s = S[i]; c = n[k, s]; delete a
					for (j = 1; j <= c; j++) a[j] = o[k, s, j]
					m[s] = c ? med(a, c) : 0 }
				split(k, f, " ")
				printf "| %s | %s | %s | %d | %d | %s | %d | %d | %s | %d | %d | %s |\n", f[1], f[2], f[3], m["base-mem"], m["kura-mem"], r(m["kura-mem"], m["base-mem"]), m["base-kh"], m["kura-kh"], r(m["kura-kh"], m["base-kh"]), m["base-kb"], m["kura-kb"], r(m["kura-kb"], m["base-kb"])
			}
		}' | sort
fi
if [[ " $SERVERS " == *" kura-tls "* ]]; then
	printf '\nTLS (kura serve * --tls-only, TLS 1.3, rustls with ring) beside plain (kura serve *), same run (medians)\n\n'
	printf '| protocol | pipeline | get:set | plain * ops/s | TLS * ops/s | TLS / plain | p99 µs plain / TLS |\n'
	printf '|---|---:|---:|---:|---:|---:|---|\n'
	sort -k1,1 -k2,2n -k3,3 "$RAW" | awk '
		function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
		function r(x, y) { return (x && y) ? sprintf("%.2f", x / y) : "-" }
		{ k = $1 " " $2 " " $3; keys[k] = 1; n[k, $4]++; o[k, $4, n[k, $4]] = $5; l[k, $4, n[k, $4]] = $6 }
		END {
			split("kura-mem kura-tls", S, " ")
			for (k in keys) {
				for (i = 1; i <= 2; i++) { s = S[i]; c = n[k, s]; delete a; delete b
					for (j = 1; j <= c; j++) { a[j] = o[k, s, j]; b[j] = l[k, s, j] }
					m[s] = c ? med(a, c) : 0; q[s] = c ? med(b, c) : 0 }
				split(k, f, " ")
				printf "| %s | %s | %s | %d | %d | %s | %d / %d |\n", f[1], f[2], f[3], m["kura-mem"], m["kura-tls"], r(m["kura-tls"], m["kura-mem"]), q["kura-mem"], q["kura-tls"]
			}
		}' | sort
fi
