"""Three `kura serve` shards behind twemproxy (nutcracker, from deploy/nutcracker.yml with its
addresses rewritten): pylibmc's own ketama (libmemcached) finds every key where the proxy put it,
and pymemcache's operations that twemproxy forwards work through it."""
import os
import socket
import subprocess
import tempfile
import time

import pylibmc
import pytest
from pymemcache.client.base import Client

from conftest import KURA

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "nutcracker.yml")
NUTCRACKER = next((p for p in ("/usr/sbin/nutcracker", "/usr/bin/nutcracker") if os.path.exists(p)), None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_kura(d, name):
    proc = subprocess.Popen(
        [KURA, "serve", name, "--host", "127.0.0.1", "--port", "0", "--threads", "2"],
        cwd=d, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    for line in proc.stderr:
        if "listening on " in line:
            return proc, line.split("listening on ")[1].split()[0]
    raise AssertionError("kura serve exited before listening")


def config(listen, shards):
    out, it = [], iter(shards)
    for line in open(DEPLOY).read().splitlines():
        body = line.lstrip()
        indent = line[: len(line) - len(body)]
        if body.startswith("listen:"):
            line = f"{indent}listen: {listen}"
        elif body.startswith("- "):
            line = f"{indent}- {next(it)}:{body[2:].split(':')[2]}"
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture
def proxy():
    if NUTCRACKER is None:
        if os.environ.get("CI") == "true" and "KURA_NO_NUTCRACKER" not in os.environ:
            pytest.fail("nutcracker is not installed (scripts/client-tests.sh installs it)")
        pytest.skip("nutcracker (twemproxy) is not installed: apt-get install nutcracker")
    with tempfile.TemporaryDirectory() as d:
        procs = []
        try:
            shards = []
            for i in range(3):
                p, addr = start_kura(d, f"s{i}.kh")
                procs.append(p)
                shards.append(addr)
            listen = f"127.0.0.1:{free_port()}"
            conf = os.path.join(d, "nutcracker.yml")
            with open(conf, "w") as f:
                f.write(config(listen, shards))
            nc = subprocess.Popen(
                [NUTCRACKER, "-c", conf, "-s", str(free_port()), "-a", "127.0.0.1",
                 "-o", os.path.join(d, "nutcracker.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            procs.append(nc)
            host, port = listen.rsplit(":", 1)
            for _ in range(250):
                try:
                    socket.create_connection((host, int(port)), timeout=1).close()
                    break
                except OSError:
                    assert nc.poll() is None, "nutcracker exited"
                    time.sleep(0.02)
            yield (host, int(port)), shards
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=10)


def test_pylibmc_ketama_agrees_with_twemproxy(proxy):
    (host, port), shards = proxy
    through = Client((host, port))
    keys = [f"ring:{i}" for i in range(500)]
    for k in keys:
        assert through.set(k, k.encode(), noreply=False)
    # libmemcached's weighted ketama with md5 keys: the ring twemproxy builds.
    direct = pylibmc.Client(shards, behaviors={"ketama_weighted": True, "hash": "md5", "ketama_hash": "md5"})
    assert [k for k in keys if direct.get(k) != k.encode()] == []
    # And each shard holds only its own keys: the union of the shards is the key set, once.
    held = []
    for s in shards:
        h, p = s.rsplit(":", 1)
        one = Client((h, int(p)))
        held += [k for k in keys if one.get(k) is not None]
    assert sorted(held) == sorted(keys)


def test_pymemcache_operations_through_twemproxy(proxy):
    (host, port), _ = proxy
    c = Client((host, port))
    assert c.set("a", b"1", noreply=False)
    assert c.get("a") == b"1"
    c.set("quiet", b"q")  # noreply: twemproxy forwards it and sends nothing back
    assert c.get("quiet") == b"q"
    assert c.set_many({f"m{i}": str(i).encode() for i in range(20)}, noreply=False) == []
    assert c.get_many([f"m{i}" for i in range(20)] + ["absent"]) == {f"m{i}": str(i).encode() for i in range(20)}
    assert c.add("a", b"x", noreply=False) is False
    assert c.add("b", b"2", noreply=False) is True
    assert c.replace("b", b"3", noreply=False) is True
    assert c.replace("nope", b"3", noreply=False) is False
    assert c.append("b", b"4", noreply=False) and c.prepend("b", b"2", noreply=False)
    assert c.get("b") == b"234"
    assert c.incr("b", 6) == 240 and c.decr("b", 300) == 0
    value, cas = c.gets("a")
    assert value == b"1"
    assert c.cas("a", b"new", cas, noreply=False) is True
    assert c.cas("a", b"newer", cas, noreply=False) is False
    assert c.gets_many(["a", "b"])["a"][0] == b"new"
    assert c.touch("a", 100, noreply=False) is True
    assert c.delete("a", noreply=False) is True
    assert c.delete("a", noreply=False) is False
    assert c.get("a") is None
    # Not forwarded by twemproxy (docs/SCALING.md): it closes the client's connection.
    for call in (lambda f: f.flush_all(noreply=False), lambda f: f.stats()):
        fresh = Client((host, port))
        with pytest.raises(Exception):
            call(fresh)
        fresh.close()
    assert c.version()
