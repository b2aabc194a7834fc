"""ukt (a Kyoto Tycoon client from PyPI) against kura serve, over Kyoto Tycoon's HTTP RPC.

ukt posts TSV bodies with base64 columns (`colenc=B`) to `/rpc/...` on the same port that serves
memcached and Tyrant. Its single-key get/set/remove default to Kyoto Tycoon's separate binary
protocol, so the `*_http` forms are used here.
"""
import time

import pytest

ukt = pytest.importorskip("ukt")


@pytest.fixture
def kt(server):
    host, port = server
    c = ukt.KyotoTycoon(host, port, serializer=ukt.KT_NONE)
    yield c
    c.close_all()


def test_set_get_remove(kt):
    assert kt.set_http("k", b"hello")
    assert kt.get_http("k") == b"hello"
    assert kt.get_http("missing") is None
    assert kt.remove_http("k") == 1
    assert kt.remove_http("k") == 0
    value = bytes(range(256)) * 10
    assert kt.set_http("bin\tkey\n", value)
    assert kt.get_http("bin\tkey\n") == value


def test_add_replace_append_cas_seize(kt):
    assert kt.add("a", b"1")
    assert not kt.add("a", b"2")  # 450: exists
    assert kt.replace("a", b"3")
    assert not kt.replace("nope", b"x")
    assert kt.append("a", b"4")
    assert kt.get_http("a") == b"34"
    assert kt.cas("a", b"34", b"new")
    assert not kt.cas("a", b"34", b"newer")
    assert kt.get_http("a") == b"new"
    assert kt.check("a") and not kt.check("nope")
    assert kt.length("a") == 3
    assert kt.seize("a") == b"new"
    assert kt.seize("a") is None


def test_increment(kt):
    assert kt.increment("n", 5) == 5
    assert kt.increment("n", -2) == 3
    assert kt.increment_double("d", 1.5) == pytest.approx(1.5)
    assert kt.increment_double("d", 0.25) == pytest.approx(1.75)


def test_bulk_and_matching(kt):
    data = {"user:%02d" % i: b"v%d" % i for i in range(20)}
    assert kt.set_bulk_http(data) == 20
    got = kt.get_bulk_http(["user:01", "user:19", "missing"])
    assert got == {"user:01": b"v1", "user:19": b"v19"}
    assert sorted(kt.match_prefix("user:1")) == ["user:1%d" % i for i in range(10)]
    assert len(kt.match_prefix("user:", max_keys=5)) == 5
    assert sorted(kt.match_regex(r"^user:0[0-4]$")) == ["user:0%d" % i for i in range(5)]
    assert kt.remove_bulk_http(["user:00", "user:01", "missing"]) == 2
    assert kt.count() == 18


def test_expiration(kt):
    assert kt.set_http("t", b"x", expire_time=1)
    assert kt.get_http("t") == b"x"
    time.sleep(2.1)
    assert kt.get_http("t") is None


def test_status_report_and_management(kt):
    kt.set_http("a", b"1")
    st = kt.status()
    assert st["count"] == 1 and st["size"] > 0
    rep = kt.report()
    assert "count" in rep or "db_total_count" in rep
    assert kt.synchronize()
    assert kt.vacuum()
    assert kt.clear()
    assert kt.count() == 0


def test_binary_protocol_single_and_bulk(kt):
    """ukt's default get/set/remove and *_bulk use Kyoto Tycoon's binary protocol (0xB8–0xBA)."""
    assert kt.set("b1", b"one") == 1
    assert kt.get("b1") == b"one"
    assert kt.get("absent") is None
    assert kt.set_bulk({"b2": b"two", "b3": b"three"}) == 2
    assert kt.get_bulk(["b1", "b2", "b3", "absent"]) == {"b1": b"one", "b2": b"two", "b3": b"three"}
    assert kt.remove_bulk(["b1", "b2", "absent"]) == 2
    assert kt.remove("b3") == 1
    assert kt.get_bulk(["b1", "b2", "b3"]) == {}
    value = bytes(range(256)) * 100
    kt.set("big", value)
    assert kt.get("big") == value
    # The same record over HTTP RPC: one store behind both.
    assert kt.get_http("big") == value
    # No reply requested: the next request still sees the write.
    kt.set_bulk({"nr": b"x"}, no_reply=True)
    assert kt.get("nr") == b"x"


def test_binary_expiration(kt):
    kt.set("bt", b"x", expire_time=1)
    assert kt.get("bt") == b"x"
    time.sleep(2.1)
    assert kt.get("bt") is None


# Cursors and similarity matching on every kind: `*` (memory hash), `+` (memory tree, in key
# order, both ways), a `.kh` (on-disk hash, forward only: the walk back answers 501, which
# ukt raises as NotImplementedError) and a `.kb` (on-disk B+ tree, in key order, both ways).
EVERY_KIND = pytest.mark.parametrize("server", ["*", "+", "c.kh", "c.kb"], indirect=True)
ORDERED = ("+", "c.kb")


@EVERY_KIND
def test_cursor_walks_every_record_once(kt, request):
    ordered = request.node.callspec.params["server"] in ORDERED
    data = {"k%02d" % i: b"v%d" % i for i in range(40)}
    assert kt.set_bulk_http(data) == 40
    walked = [k for k, _ in kt.cursor()]
    assert len(walked) == 40 and set(walked) == set(data)
    if ordered:
        assert walked == sorted(data)
    values = dict(iter(kt.cursor()))
    assert values == data
    # From a key: the rest of the walk.
    cur = kt.cursor()
    assert cur.jump("k10")
    assert cur.key() == "k10"
    rest = [k for k, _ in cur]
    assert rest == walked[walked.index("k10"):]
    assert not kt.cursor().jump("absent" if not ordered else "zz")


@EVERY_KIND
def test_cursor_reads_and_writes_at_the_cursor(kt, request):
    ordered = request.node.callspec.params["server"] in ORDERED
    assert kt.set_bulk_http({"a": b"1", "b": b"2", "c": b"3", "d": b"4"}) == 4
    order = [k for k, _ in kt.cursor()]
    cur = kt.cursor()
    assert cur.jump()
    assert cur.get() == (order[0], kt.get_http(order[0]))
    assert cur.value(step=True) == kt.get_http(order[0])
    assert cur.key() == order[1]
    assert cur.set_value(b"new", step=True)
    assert kt.get_http(order[1]) == b"new"
    assert cur.key() == order[2]
    assert cur.remove()
    assert kt.get_http(order[2]) is None
    assert cur.key() == order[3]
    assert cur.seize() == (order[3], {"a": b"1", "b": b"2", "c": b"3", "d": b"4"}[order[3]])
    assert kt.get_http(order[3]) is None
    assert cur.get() is None  # past the last record
    assert cur.seize() is None and not cur.is_valid()
    cur = kt.cursor()
    if ordered:
        assert cur.jump_back()
        assert cur.key() == "b"
        assert cur.step_back()
        assert cur.key() == "a"
        assert not cur.step_back()
        assert cur.jump_back("az")
        assert cur.key() == "a"
    else:
        with pytest.raises(NotImplementedError):
            cur.jump_back()
        assert cur.jump(order[0])
        with pytest.raises(NotImplementedError):
            cur.step_back()
    assert cur.jump()
    assert cur.close()
    assert kt.count() == 2


@EVERY_KIND
def test_match_prefix_regex_similar(kt, request):
    words = ["apple", "apply", "ample", "maple", "applesauce", "banana"]
    assert kt.set_bulk_http({w: b"1" for w in words}) == len(words)
    assert sorted(kt.match_prefix("appl")) == ["apple", "applesauce", "apply"]
    assert sorted(kt.match_regex("^a.*e$")) == ["ample", "apple", "applesauce"]
    # ukt asks with utf=true; nearest first, then by key.
    assert kt.match_similar("apple") == ["apple", "ample", "apply"]
    assert kt.match_similar("apple", distance=2, max_keys=4) == ["apple", "ample", "apply", "maple"]
    assert kt.match_similar("zzz") == []
    if request.node.callspec.params["server"] in ORDERED:
        # Key order, as Kyoto Cabinet's tree database walks its cursor.
        assert kt.match_prefix("appl") == ["apple", "applesauce", "apply"]
        assert kt.match_regex("^a.*e$") == ["ample", "apple", "applesauce"]


# A B+ tree reports itself as Kyoto Cabinet's TreeDB does (`type` 49, its comparator as
# `rcomp`), and its cursors, match_prefix and match_regex follow the comparator it was made
# with (`#cmp=lexdesc` here: descending).
@pytest.mark.parametrize("server", ["c.kb#cmp=lexdesc"], indirect=True)
def test_a_tree_database_status_and_its_order(kt):
    assert kt.set_bulk_http({"k%d" % i: b"v" for i in range(5)}) == 5
    st = kt.status()
    assert st["type"] == 49 or st["type"] == "49"
    assert st["rcomp"] == "lexicaldesc"
    assert [k for k, _ in kt.cursor()] == ["k4", "k3", "k2", "k1", "k0"]
    cur = kt.cursor()
    assert cur.jump_back()
    assert cur.key() == "k0"
    assert kt.match_prefix("k") == ["k4", "k3", "k2", "k1", "k0"]
    assert kt.match_regex("[0-2]$", max_keys=2) == ["k2", "k1"]


def test_a_32_mib_value_over_http_and_binary(kt):
    """Values as large as Kyoto Tycoon clients send: 32 MiB through both protocols."""
    value = bytes(range(256)) * (32 * 4096)
    assert kt.set_http("big-http", value)
    assert kt.get_http("big-http") == value
    assert kt.set("big-bin", value) == 1
    assert kt.get("big-bin") == value
    assert kt.get_http("big-bin") == value
