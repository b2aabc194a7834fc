#!/usr/bin/env bash
# Fail a twemproxy (nutcracker) shard over to its Kura replica, and later bring the old master
# back as the new master's replica. docs/SCALING.md ("A replica per shard and failover") says
# when to run it and what each durability mode can lose.
#
#   scripts/failover.sh promote --proxy-config FILE --dead HOST:PORT --replica HOST:PORT \
#       (--nutcracker-pid FILE | --restart CMD) [--kura PATH]
#     1. refuses if the dead master still answers (two masters would take writes);
#     2. promotes the replica (`kura remote setmst --none`: it stops following and takes
#        writes) and checks that it says so (`repl_role`, no `read_only`);
#     3. rewrites the pool: the server line `- DEAD:WEIGHT NAME` becomes
#        `- REPLICA:WEIGHT NAME` (the NAME keeps the key placement: the ring is built from the
#        names), checked by `nutcracker -t` first; the old file is kept as FILE.before-failover;
#     4. restarts nutcracker (0.5.0 has no configuration reload; SIGHUP only reopens its log):
#        with --nutcracker-pid, the process is stopped and started again with the command line
#        it runs with (from /proc); with --restart, CMD is run (e.g. `systemctl restart
#        nutcracker`). Then waits until the proxy's listen address accepts connections, and
#        prints how long the restart took.
#
#   scripts/failover.sh rejoin --old HOST:PORT --new HOST:PORT [--wait SECS] [--kura PATH]
#     The old master, running again (best started with `--master NEW --bootstrap replace`:
#     its records are replaced by a snapshot of the new master, the count logged), follows
#     the new one: `kura remote setmst NEW --force` unless it already does; then waits until
#     its position reaches the new master's log as it was at the start (default 60 s).
#
# Exit status: 0 done; 1 refused (the dead master answers, the pool has no such server or it
# has no name, the replica does not take writes, the proxy or the rejoin did not come up in
# time); 2 bad usage.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "failover: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }

KURA=${KURA:-kura}
[ $# -ge 1 ] || usage
CMD=$1; shift
CONF='' DEAD='' REPLICA='' PIDFILE='' RESTART='' OLD='' NEW='' WAIT=60
while [ $# -gt 0 ]; do
	case $1 in
	--proxy-config) CONF=$2; shift 2 ;;
	--dead) DEAD=$2; shift 2 ;;
	--replica) REPLICA=$2; shift 2 ;;
	--nutcracker-pid) PIDFILE=$2; shift 2 ;;
	--restart) RESTART=$2; shift 2 ;;
	--old) OLD=$2; shift 2 ;;
	--new) NEW=$2; shift 2 ;;
	--wait) WAIT=$2; shift 2 ;;
	--kura) KURA=$2; shift 2 ;;
	*) echo "failover: unknown argument $1" >&2; usage ;;
	esac
done

host_of() { echo "${1%:*}"; }
port_of() { echo "${1##*:}"; }
# `kura remote` against HOST:PORT.
remote() { local a=$1; shift; "$KURA" remote --host "$(host_of "$a")" --port "$(port_of "$a")" --timeout 5 "$@"; }
# One `stat` field of HOST:PORT (empty when absent).
stat_of() { remote "$1" inform 2>/dev/null | sed -n "s/^$2: //p" | head -1; }
answers() { (exec 3<>"/dev/tcp/$(host_of "$1")/$(port_of "$1")") 2>/dev/null; }

promote() {
	[ -n "$CONF" ] && [ -n "$DEAD" ] && [ -n "$REPLICA" ] || usage
	[ -n "$PIDFILE" ] || [ -n "$RESTART" ] || usage
	[ -f "$CONF" ] || die "no proxy configuration $CONF"
	local nutcracker
	nutcracker=$(command -v nutcracker || echo /usr/sbin/nutcracker)
	if answers "$DEAD"; then
		die "the master $DEAD still answers: stop it first (two masters would both take writes)"
	fi
	# The pool's line for the dead master: `- HOST:PORT:WEIGHT NAME`.
	local line
	line=$(grep -nE "^[[:space:]]*- *${DEAD//./\\.}:[0-9]+( |$)" "$CONF" || true)
	[ -n "$line" ] || die "$CONF has no server $DEAD"
	[ "$(printf '%s\n' "$line" | wc -l)" -eq 1 ] || die "$CONF lists $DEAD more than once"
	echo "$line" | grep -qE ":[0-9]+ +[^ #][^ ]* *(#.*)?$" ||
		die "$CONF names no server $DEAD (write it HOST:PORT:WEIGHT NAME): without a name the ring is built from the address, and replacing it would move every key of the shard"

	local t0 t1
	t0=$(now_ms)
	remote "$REPLICA" setmst --none >/dev/null || die "setmst --none on $REPLICA failed"
	local ro role
	ro=$(stat_of "$REPLICA" read_only)
	role=$(stat_of "$REPLICA" repl_role)
	[ -z "$ro" ] || die "$REPLICA still refuses writes: $ro"
	[ "$role" = master ] || [ "$role" = none ] || die "$REPLICA is $role after setmst --none"
	t1=$(now_ms)
	echo "promoted $REPLICA ($role, taking writes) in $((t1 - t0)) ms"

	local tmp="$CONF.failover.tmp"
	sed -E "s/^([[:space:]]*- *)${DEAD//./\\.}(:[0-9]+ )/\\1${REPLICA}\\2/" "$CONF" >"$tmp"
	if ! "$nutcracker" -t -c "$tmp" >/dev/null 2>&1; then
		rm -f "$tmp"
		die "nutcracker -t rejects the rewritten pool (left $CONF as it was)"
	fi
	cp -p "$CONF" "$CONF.before-failover"
	mv "$tmp" "$CONF"
	echo "pool: $DEAD replaced by $REPLICA in $CONF (was kept as $CONF.before-failover)"

	local listen
	listen=$(sed -nE 's/^[[:space:]]*listen: *([^ ]+).*/\1/p' "$CONF" | head -1)
	t0=$(now_ms)
	if [ -n "$PIDFILE" ]; then
		local pid args=()
		pid=$(cat "$PIDFILE")
		[ -r "/proc/$pid/cmdline" ] || die "nutcracker (pid $pid from $PIDFILE) is not running"
		mapfile -d '' args <"/proc/$pid/cmdline"
		kill -TERM "$pid"
		# Gone, or a zombie its parent has not reaped yet (it no longer holds its ports).
		gone() { [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null || echo Z)" = Z ]; }
		for _ in $(seq 500); do gone && break; sleep 0.01; done
		gone || die "nutcracker (pid $pid) did not stop"
		rm -f "$PIDFILE"
		# Its own command line again (with -d it detaches and writes the pid file itself).
		setsid "${args[@]}" </dev/null >/dev/null 2>&1 &
	else
		sh -c "$RESTART" || die "the restart command failed: $RESTART"
	fi
	for _ in $(seq 1000); do answers "$listen" && break; sleep 0.01; done
	answers "$listen" || die "the proxy does not listen on $listen after its restart"
	t1=$(now_ms)
	echo "nutcracker restarted, listening on $listen, in $((t1 - t0)) ms"
}

rejoin() {
	[ -n "$OLD" ] && [ -n "$NEW" ] || usage
	local target mh mp
	target=$(stat_of "$NEW" ulog_last_ts)
	[ -n "$target" ] || die "$NEW does not answer, or keeps no update log (--ulog)"
	mh=$(stat_of "$OLD" mhost)
	mp=$(stat_of "$OLD" mport)
	if [ "$mh:$mp" != "$NEW" ]; then
		remote "$OLD" setmst "$NEW" --force >/dev/null || die "setmst $NEW on $OLD refused"
		echo "$OLD follows $NEW (its records replaced by a snapshot of $NEW)"
	fi
	local t0 rts
	t0=$(now_ms)
	while :; do
		rts=$(stat_of "$OLD" rts)
		if [ -n "$rts" ] && [ "$rts" -ge "$target" ] &&
			[ "$(stat_of "$OLD" master_connected)" = true ]; then
			break
		fi
		[ $(($(now_ms) - t0)) -lt $((WAIT * 1000)) ] ||
			die "$OLD has not caught up with $NEW after $WAIT s (at ${rts:-?}, $NEW at $target; repl_error: $(stat_of "$OLD" repl_error))"
		sleep 0.1
	done
	echo "$OLD is a replica of $NEW, at its position $rts (caught up in $(($(now_ms) - t0)) ms)"
}

case $CMD in
promote) promote ;;
rejoin) rejoin ;;
-h | --help | help) usage ;;
*) echo "failover: unknown command $CMD" >&2; usage ;;
esac
