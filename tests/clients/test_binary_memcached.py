"""python-binary-memcached (bmemcached) against kura serve: the memcached binary protocol."""
import bmemcached


def client(server):
    host, port = server
    return bmemcached.Client((f"{host}:{port}",))


def test_storage_and_retrieval(server):
    c = client(server)
    assert c.set("a", "hello") is True
    assert c.get("a") == "hello"
    assert c.add("a", "x") is False
    assert c.add("b", "y") is True
    assert c.replace("nope", "z") is False
    assert c.replace("a", "h2") is True
    assert c.get_multi(["a", "b", "zz"]) == {"a": "h2", "b": "y"}
    big = "x" * 500_000
    assert c.set("big", big) is True
    assert c.get("big") == big


def test_cas_counters_flush(server):
    c = client(server)
    c.set("b", "y")
    value, cas = c.gets("b")
    assert value == "y"
    assert c.cas("b", "new", cas) is True
    assert c.cas("b", "newer", cas) is False
    assert c.set("n", 5) is True
    assert c.incr("n", 10) == 15
    assert c.decr("n", 100) == 0
    assert c.delete("n") is True
    assert c.get("n") is None
    stats = next(iter(c.stats().values()))
    assert int(stats["curr_items"]) == 1
    assert c.flush_all() is True
    assert c.get("b") is None
