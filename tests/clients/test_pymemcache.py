"""pymemcache (Pinterest's memcached client) against kura serve: the text protocol."""
from pymemcache.client.base import Client


def test_storage_and_retrieval(server):
    c = Client(server, default_noreply=False)
    assert c.set("a", b"hello", expire=100)
    assert c.get("a") == b"hello"
    assert c.add("a", b"x") is False
    assert c.add("b", b"y") is True
    assert c.replace("nope", b"z") is False
    assert c.append("a", b"++") and c.prepend("a", b"--")
    assert c.get("a") == b"--hello++"
    assert c.append("missing", b"x") is False
    assert c.get_many(["a", "b", "zz"]) == {"a": b"--hello++", "b": b"y"}


def test_cas_flags_and_binary_values(server):
    c = Client(server, default_noreply=False)
    value = bytes(range(256)) + b"\r\n"
    c.set("bin", value)
    got, cas = c.gets("bin")
    assert got == value
    assert c.cas("bin", b"new", cas) is True
    assert c.cas("bin", b"newer", cas) is False  # changed since the gets
    assert c.cas("absent", b"x", b"1") is None
    # Flags travel with the value (pymemcache uses them for its serializer).
    c.set("f", b"v", flags=123)
    assert c.get("f") == b"v"
    raw = c.raw_command(b"get f", b"END\r\n")
    assert raw.startswith(b"VALUE f 123 1\r\n")


def test_counters_delete_touch_flush(server):
    c = Client(server, default_noreply=False)
    c.set("n", b"5")
    assert c.incr("n", 10) == 15
    assert c.decr("n", 100) == 0
    assert c.incr("absent", 1) is None
    assert c.delete("n") is True
    assert c.delete("n") is False
    c.set("t", b"1")
    assert c.touch("t", 100) is True
    assert c.touch("absent", 100) is False
    assert c.flush_all() is True
    assert c.get("t") is None


def test_stats_and_version(server):
    c = Client(server, default_noreply=False)
    c.set("x", b"1")
    c.get("x")
    c.get("y")
    stats = c.stats()
    assert stats[b"get_hits"] >= 1 and stats[b"get_misses"] >= 1
    assert stats[b"curr_items"] == 1
    assert c.version()
