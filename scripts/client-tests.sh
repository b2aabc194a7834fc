#!/usr/bin/env bash
# Client libraries and conformance tools written by others, against the real `kura serve`
# (debug build): pymemcache, pylibmc (libmemcached), python-binary-memcached (pytest, in a
# local virtual environment .venv, on a `.kh`), Perl Cache::Memcached, libmemcached's
# memccapable and memcdump (Debian packages, installed when missing; on `*` and on a `.kh`),
# pytyrant and ukt (also on a `.kb`), pyrant on a table (`.kt`), and Tokyo Tyrant's tcrmgr on
# a `.kb` where installable; a metrics scrape parsed by prometheus_client; and redis-py's own
# test suite (scripts/redis-client-tests.sh; tests/clients/redis-py.txt, what it deselects and why).
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkg() { # COMMAND-OR-FILE PACKAGE...
    local probe=$1; shift
    if [ -e "$probe" ] || command -v "$probe" >/dev/null 2>&1; then return 0; fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$@" >/dev/null; }
}
need_pkg memccapable libmemcached-tools
# twemproxy, for tests/clients/test_twemproxy.py (pylibmc's ketama and pymemcache through it).
need_pkg /usr/sbin/nutcracker nutcracker 2>/dev/null ||
    { echo "client-tests.sh: nutcracker cannot be installed here: test_twemproxy.py is skipped"; export KURA_NO_NUTCRACKER=1; }
# Tokyo Tyrant's own manager, tcrmgr (Debian package tokyotyrant), for `tcrmgr list` on a B+
# tree below. Debian dropped the package after Debian 11: where it cannot be installed, that
# check says so and is skipped (pytyrant covers the same calls in tests/clients).
need_pkg tcrmgr tokyotyrant 2>/dev/null || true
need_pkg /usr/share/perl5/Cache/Memcached.pm libcache-memcached-perl

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv || { need_pkg /nonexistent python3-venv && python3 -m venv .venv; }
fi
.venv/bin/pip install -q -r tests/clients/requirements.txt

# pytyrant (PyPI) is the only pure-Python Tokyo Tyrant client there is, and it predates
# Python 3: fetch its release from PyPI and convert it mechanically (2to3, then bytes for the
# wire: the frame header, the receive buffer, the misc function names; collections.abc for the
# dict mixin). The protocol code stays the library's own.
port_pytyrant() {
    local dest=.venv/ported
    [ -f "$dest/pytyrant.py" ] && return 0
    local tmp; tmp=$(mktemp -d)
    .venv/bin/pip download -q --no-deps --no-binary :all: -d "$tmp" pytyrant==1.1.17
    tar xzf "$tmp"/pytyrant-1.1.17.tar.gz -C "$tmp"
    cp "$tmp"/pytyrant-1.1.17/pytyrant.py "$tmp"/p.py
    .venv/bin/python -W ignore -m lib2to3 -w -n "$tmp"/p.py >/dev/null 2>&1
    sed -i -e 's/^import UserDict$/import collections.abc/' \
        -e 's/^class PyTyrant(object, UserDict.DictMixin):/class PyTyrant(collections.abc.MutableMapping):/' \
        -e "s/^    d = ''$/    d = b''/" \
        -e 's/return \[chr(MAGIC) + chr(code)\]/return [bytes([MAGIC, code])]/' \
        -e 's/self\.t\.misc("\([a-z]*\)"/self.t.misc(b"\1"/' "$tmp"/p.py
    mkdir -p "$dest" && mv "$tmp"/p.py "$dest/pytyrant.py" && rm -rf "$tmp"
}
port_pytyrant
# pyrant (PyPI), a pure-Python Tyrant client with table-database support (records as dicts of
# columns, indexes, genuid, queries), also predates Python 3: 2to3 without its dict fixer
# (pyrant defines iterkeys / iteritems itself; the calls on plain dicts renamed), then bytes
# for the wire in its frame packing: text is str, sent as UTF-8, as its unicode/str split meant.
port_pyrant() {
    local dest=.venv/ported
    [ -f "$dest/pyrant/__init__.py" ] && return 0
    local tmp; tmp=$(mktemp -d)
    .venv/bin/pip download -q --no-deps --no-binary :all: -d "$tmp" pyrant==0.6.5
    tar xzf "$tmp"/pyrant-0.6.5.tar.gz -C "$tmp"
    local src="$tmp"/pyrant-0.6.5/pyrant
    .venv/bin/python -W ignore -m lib2to3 -x dict -w -n "$src" >/dev/null 2>&1
    sed -i -e 's/ value\.iteritems()/ value.items()/' -e 's/ items\.iteritems()/ items.items()/' \
        "$src"/__init__.py
    # Python 2's integer division in the result cache's chunk number; a Python 3 str has
    # __iter__ (a Python 2 one did not: the query code takes it for a list of words); a
    # generator ends by returning (PEP 479).
    sed -i -e 's/ kwargs\.iteritems()/ kwargs.items()/' \
        -e 's|^        return index / self\.chunk_size$|        return index // self.chunk_size|' \
        -e "s/hasattr(\([a-z.]*\), *'__iter__')/(hasattr(\1, '__iter__') and not isinstance(\1, str))/" \
        -e 's/^\( *\)raise StopIteration$/\1return/' \
        -e "s/^\( *\)prep = lambda k,v: (k, self\.query\._to_python(v))$/\1prep = lambda k,v: (k.decode('utf-8'), self.query._to_python(v.decode('utf-8')))/" \
        "$src"/query.py
    sed -i -e "s/^    buf = ''$/    buf = b''/" \
        -e '0,/^        elif isinstance(arg, str):$/s//        elif isinstance(arg, bytes):/' \
        -e 's/^                    v = str(v)$/                    v = v if isinstance(v, bytes) else str(v).encode(ENCODING)/' \
        -e 's/^                buf += "%s%s" % (struct.pack(">I", len(v)), v)$/                buf += struct.pack(">I", len(v)) + v/' \
        -e 's/^    return "%s%s" % (struct.pack(fmt, MAGIC_NUMBER, code, \*largs), buf)$/    return struct.pack(fmt, MAGIC_NUMBER, code, *largs) + buf/' \
        -e "s/^        d = ''$/        d = b''/" \
        "$src"/protocol.py
    mkdir -p "$dest" && mv "$src" "$dest/pyrant" && rm -rf "$tmp"
}
port_pyrant
cargo build -q -p kura
KURA="$PWD/target/debug/kura"

KURA_BIN="$KURA" PYTHONPATH="$PWD/.venv/ported" .venv/bin/python -m pytest -q tests/clients

# The tools below need a running server: one on `*`, then one on a `.kh`, each on a free
# port, stopped at the end.
work=$(mktemp -d)
pid=
trap 'if [ -n "$pid" ]; then kill $pid 2>/dev/null; wait $pid 2>/dev/null; fi; rm -rf "$work"' EXIT
for db in '*' "$work/tools.kh"; do
    log="$work/serve.log"
    : >"$log"
    "$KURA" serve "$db" --port 0 --threads 2 2>"$log" &
    pid=$!
    addr=
    for _ in $(seq 100); do
        addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$log")
        [ -n "$addr" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
        sleep 0.05
    done
    [ -n "$addr" ] || { echo "kura serve did not start"; cat "$log"; exit 1; }

    perl tests/clients/perl/cache_memcached.pl "$addr"

    out=$(memccapable -h "${addr%:*}" -p "${addr##*:}" -t 5 2>&1) || true
    failed=$(printf '%s\n' "$out" | grep -c '\[FAIL\]' || true)
    total=$(printf '%s\n' "$out" | grep -cE '\[(pass|FAIL)\]' || true)
    if [ "$total" -eq 0 ] || [ "$failed" -ne 0 ]; then
        printf '%s\n' "$out"
        echo "memccapable: $((total - failed)) passed, $failed failed ($db)"
        exit 1
    fi
    echo "memccapable: $total passed, 0 failed ($db)"

    # memcdump (libmemcached-tools) lists the keys through `stats cachedump`.
    printf 'set dump:a 0 0 1\r\nx\r\nset dump:b 0 0 1\r\ny\r\nquit\r\n' |
        timeout 5 bash -c "exec 3<>/dev/tcp/${addr%:*}/${addr##*:}; cat >&3; cat <&3 >/dev/null"
    keys=$(memcdump --servers="$addr" | grep -c '^dump:' || true)
    if [ "$keys" -ne 2 ]; then
        echo "memcdump: 0 passed, 1 failed ($db: $keys of 2 keys listed)"
        exit 1
    fi
    echo "memcdump: 1 passed, 0 failed ($db)"

    kill "$pid"
    wait "$pid" || true
    pid=
done

# Tokyo Tyrant's tcrmgr against a B+ tree: `list` walks iterinit / iternext (key order, a key
# once per value), `misc putdup` adds a value, `misc get` gives them all.
if command -v tcrmgr >/dev/null 2>&1; then
    log="$work/serve.log"
    : >"$log"
    "$KURA" serve "$work/tcrmgr.kb" --port 0 --threads 2 2>"$log" &
    pid=$!
    addr=
    for _ in $(seq 100); do
        addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$log")
        [ -n "$addr" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
        sleep 0.05
    done
    [ -n "$addr" ] || { echo "kura serve did not start"; cat "$log"; exit 1; }
    host=${addr%:*} port=${addr##*:}
    for k in m b x a ba c; do tcrmgr put -port "$port" "$host" "$k" "v$k"; done
    tcrmgr misc -port "$port" "$host" putdup b 2 >/dev/null
    got=$(tcrmgr list -port "$port" "$host" | tr '\n' ' ')
    want="a b b ba c m x "
    vals=$(tcrmgr misc -port "$port" "$host" get b | tr '\n' ' ')
    if [ "$got" != "$want" ] || [ "$vals" != "vb 2 " ]; then
        echo "tcrmgr: 0 passed, 1 failed (list: '$got', want '$want'; misc get b: '$vals')"
        exit 1
    fi
    echo "tcrmgr: 1 passed, 0 failed (.kb)"
    kill "$pid"
    wait "$pid" || true
    pid=
else
    echo "tcrmgr: not installed (no tokyotyrant package for this system): skipped"
fi

# redis-py's own tests against `kura serve '*'` and a `.kt`, RESP3 and RESP2.
REDIS_TARGET=kura KURA="$KURA" scripts/redis-client-tests.sh
