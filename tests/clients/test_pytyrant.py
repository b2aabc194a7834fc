"""pytyrant (a pure-Python Tokyo Tyrant binary-protocol client from PyPI) against kura serve.

pytyrant 1.1.17 predates Python 3: scripts/client-tests.sh fetches it from PyPI and runs the
standard 2to3 conversion plus a few byte-string fixes over it (see `port_pytyrant` there); the
protocol code itself is the library's own. It speaks Tyrant 1.1.17, whose codes for vanish /
copy / restore moved in 1.1.41 (which Kura follows), so those three are not called through it.
"""
import os
import struct

import pytest

pytyrant = pytest.importorskip("pytyrant")


@pytest.fixture
def tt(server):
    t = pytyrant.Tyrant.open(*server)
    yield t
    t.close()


def test_put_get_and_the_put_variants(tt):
    tt.put(b"a", b"hello")
    assert tt.get(b"a") == b"hello"
    with pytest.raises(pytyrant.TyrantError):
        tt.putkeep(b"a", b"other")  # existing record
    tt.putkeep(b"b", b"new")
    tt.putcat(b"a", b" world")
    assert tt.get(b"a") == b"hello world"
    tt.putshl(b"a", b"!!", 5)
    assert tt.get(b"a") == b"rld!!"
    tt.putnr(b"c", b"no reply")
    assert tt.vsiz(b"c") == 8  # the next request is answered after putnr's write
    tt.out(b"c")
    with pytest.raises(pytyrant.TyrantError):
        tt.get(b"c")
    with pytest.raises(pytyrant.TyrantError):
        tt.out(b"c")
    with pytest.raises(pytyrant.TyrantError):
        tt.vsiz(b"c")


def test_binary_keys_and_values(tt):
    key = bytes(range(256))
    value = os.urandom(100_000) + b"\x00\r\n"
    tt.put(key, value)
    assert tt.get(key) == value
    assert tt.vsiz(key) == len(value)


def test_mget_fwmkeys_and_iteration(tt):
    for i in range(50):
        tt.put(b"user:%03d" % i, b"v%d" % i)
    tt.put(b"other", b"x")
    got = dict(tt.mget([b"user:001", b"missing", b"user:049"]))
    assert got == {b"user:001": b"v1", b"user:049": b"v49"}
    assert sorted(tt.fwmkeys(b"user:", 1000)) == [b"user:%03d" % i for i in range(50)]
    assert len(tt.fwmkeys(b"user:", 7)) == 7
    tt.iterinit()
    seen = []
    while True:
        try:
            seen.append(tt.iternext())
        except pytyrant.TyrantError:
            break
    assert sorted(seen) == sorted([b"user:%03d" % i for i in range(50)] + [b"other"])
    assert tt.rnum() == 51
    assert tt.size() > 0


def test_misc_lists_stat_and_sync(tt):
    assert tt.misc(b"putlist", 0, [b"k1", b"v1", b"k2", b"v2"]) == []
    assert tt.misc(b"getlist", 0, [b"k1", b"nope", b"k2"]) == [b"k1", b"v1", b"k2", b"v2"]
    assert tt.misc(b"outlist", 0, [b"k1"]) == []
    assert tt.misc(b"getlist", 0, [b"k1", b"k2"]) == [b"k2", b"v2"]
    tt.sync()
    stat = dict(line.split(b"\t", 1) for line in tt.stat().splitlines() if line)
    assert stat[b"rnum"] == str(tt.rnum()).encode()
    for field in (b"version", b"time", b"pid", b"sid", b"type", b"path", b"size", b"bigend"):
        assert field in stat
    with pytest.raises(pytyrant.TyrantError):
        tt.misc(b"setindex", 0, [b"col", b"0"])  # a table-database function
    # Last: a failed misc is answered as Tyrant does (code 1, then a zero count), and pytyrant
    # leaves that count unread, as it would with Tyrant itself.


def test_dict_wrapper(server):
    d = pytyrant.PyTyrant.open(*server)
    d[b"x"] = b"1"
    assert d[b"x"] == b"1"
    assert b"x" in d and b"y" not in d
    with pytest.raises(KeyError):
        d[b"y"]
    d.multi_set([(b"m1", b"a"), (b"m2", b"b")])
    assert d.multi_get([b"m1", b"m2"]) == [b"a", b"b"]
    d.concat(b"x", b"23")
    assert d[b"x"] == b"123"
    assert d.get_size(b"x") == 3
    del d[b"x"]
    assert len(d) == 2
    d.close()


def test_a_memcached_client_sees_tyrant_writes(server, tt):
    """One store behind every protocol: a record put over Tyrant is read over memcached."""
    import socket

    tt.put(b"shared", b"value")
    s = socket.create_connection(server)
    s.sendall(b"get shared\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        buf += s.recv(4096)
    assert buf == b"VALUE shared 0 5\r\nvalue\r\nEND\r\n"
    s.close()


def test_addint_adddouble_raw(server):
    """pytyrant has no addint/adddouble: send Tyrant's frames by hand on a socket."""
    import socket

    s = socket.create_connection(server)

    def recv(n):
        b = b""
        while len(b) < n:
            chunk = s.recv(n - len(b))
            assert chunk
            b += chunk
        return b

    s.sendall(struct.pack(">BBII", 0xC8, 0x60, 3, 5) + b"cnt")
    assert recv(1) == b"\x00" and struct.unpack(">i", recv(4))[0] == 5
    s.sendall(struct.pack(">BBIi", 0xC8, 0x60, 3, -7) + b"cnt")
    assert recv(1) == b"\x00" and struct.unpack(">i", recv(4))[0] == -2
    s.sendall(struct.pack(">BBIqq", 0xC8, 0x61, 3, 1, 500_000_000_000) + b"dbl")
    assert recv(1) == b"\x00"
    integ, fract = struct.unpack(">qq", recv(16))
    assert (integ, fract) == (1, 500_000_000_000)
    s.close()


# A B+ tree (`.kb`), as Tokyo Tyrant serves a `.tcb` (tcadb.c's B+ tree functions): iteration
# and fwmkeys in key order, duplicates through misc, every value of a key from misc get,
# getlist and range, outlist removing them all.
@pytest.mark.parametrize("server", ["c.kb"], indirect=True)
def test_a_b_plus_tree_in_key_order_with_duplicates(tt):
    for k in [b"m", b"b", b"x", b"a", b"ba", b"c"]:
        tt.put(k, b"v")
    tt.iterinit()
    seen = []
    while True:
        try:
            seen.append(tt.iternext())
        except pytyrant.TyrantError:
            break
    assert seen == [b"a", b"b", b"ba", b"c", b"m", b"x"]
    assert tt.fwmkeys(b"b", 10) == [b"b", b"ba"]
    assert tt.misc(b"putdup", 0, [b"b", b"2"]) == []
    assert tt.misc(b"putdupback", 0, [b"b", b"0"]) == []
    assert tt.misc(b"putlist", 0, [b"c", b"w"]) == []
    assert tt.get(b"b") == b"0"
    assert tt.misc(b"get", 0, [b"b"]) == [b"0", b"v", b"2"]
    assert tt.misc(b"getlist", 0, [b"c"]) == [b"c", b"v", b"c", b"w"]
    assert tt.misc(b"range", 0, [b"b", b"0", b"c"]) == [b"b", b"0", b"b", b"v", b"b", b"2", b"ba", b"v"]
    assert tt.misc(b"regex", 0, [b"^b"]) == [b"b", b"0", b"b", b"v", b"b", b"2", b"ba", b"v"]
    assert tt.misc(b"iterinit", 0, [b"bb"]) == []
    assert tt.misc(b"iternext", 0, []) == [b"c", b"v"]
    assert tt.rnum() == 9
    assert tt.misc(b"outlist", 0, [b"b", b"c"]) == []
    assert tt.rnum() == 4
    stat = dict(line.split(b"\t", 1) for line in tt.stat().splitlines() if line)
    assert stat[b"type"] == b"B+ tree"
