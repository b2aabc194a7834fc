"""pylibmc (libmemcached) against kura serve, text and binary protocol."""
import pylibmc
import pytest


@pytest.mark.parametrize("binary", [False, True])
def test_libmemcached_basics(server, binary):
    host, port = server
    mc = pylibmc.Client([f"{host}:{port}"], binary=binary)
    assert mc.set("a", b"hello")
    assert mc.get("a") == b"hello"
    assert mc.add("a", b"x") is False
    assert mc.replace("a", b"h2") is True
    assert mc.get_multi(["a", "zz"]) == {"a": b"h2"}
    assert mc.append("a", b"!")
    assert mc.get("a") == b"h2!"
    mc.set("n", 5)
    assert mc.incr("n", 10) == 15
    assert mc.decr("n", 20) == 0
    assert mc.delete("a") is True
    assert mc.delete("a") is False
    mc.set_multi({"k1": b"1", "k2": b"2"})
    assert mc.get_multi(["k1", "k2"]) == {"k1": b"1", "k2": b"2"}
    assert mc.flush_all()
    assert mc.get("k1") is None


def test_libmemcached_cas(server):
    host, port = server
    mc = pylibmc.Client([f"{host}:{port}"], behaviors={"cas": True})
    mc.set("c", b"v")
    value, cas = mc.gets("c")
    assert value == b"v"
    assert mc.cas("c", b"w", cas) is True
    assert mc.cas("c", b"z", cas) is False
