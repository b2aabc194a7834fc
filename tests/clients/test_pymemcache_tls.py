"""pymemcache over TLS (its `tls_context`, as pymemcache's own TLS integration tests use it)
against `kura serve --tls-port`: Python's `ssl` module as the client, certificates made here."""
import os
import ssl
import subprocess
import tempfile

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheUnexpectedCloseError

from conftest import KURA


def openssl(d, *args):
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)


def make_certs(d):
    """ca.pem; server.pem/.key for 127.0.0.1 and localhost; client.pem/.key (CN=py)."""
    openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=Kura test CA")
    for name, subj, ext in [
        ("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"),
        ("client", "/CN=py", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"),
    ]:
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext)
        openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
                "-out", name + ".csr", "-subj", subj)
        openssl(d, "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext")


@pytest.fixture(params=[False, True], ids=["server-cert", "client-cert-required"])
def tls_server(request):
    """Yield (host, tls_port, certificate directory, client certificates required)."""
    with tempfile.TemporaryDirectory() as d:
        make_certs(d)
        extra = ["--tls-ca", "ca.pem"] if request.param else []
        proc = subprocess.Popen(
            [KURA, "serve", "*", "--port", "0", "--tls-port", "0", "--threads", "2",
             "--tls-cert", "server.pem", "--tls-key", "server.key", *extra],
            cwd=d, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )
        try:
            addrs = []
            for line in proc.stderr:  # wait for both listeners, never sleep
                if "listening on " in line:
                    addrs.append(line.split("listening on ")[1].split()[0])
                    if len(addrs) == 2:
                        break
            assert len(addrs) == 2, "kura serve exited before listening"
            host, port = addrs[1].rsplit(":", 1)
            yield host, int(port), d, request.param
        finally:
            proc.terminate()
            assert proc.wait(timeout=10) == 0, "kura serve did not stop cleanly on SIGTERM"


def context(d, with_cert):
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(os.path.join(d, "client.pem"), os.path.join(d, "client.key"))
    return ctx


def test_pymemcache_text_protocol_over_tls(tls_server):
    host, port, d, need_cert = tls_server
    c = Client((host, port), tls_context=context(d, need_cert), default_noreply=False)
    assert c.set("a", b"hello", expire=100)
    assert c.get("a") == b"hello"
    assert c.add("a", b"x") is False
    value = bytes(range(256)) * 1000  # larger than one TLS record
    c.set("big", value)
    assert c.get("big") == value
    got, cas = c.gets("a")
    assert c.cas("a", b"new", cas) is True
    assert c.get_many(["a", "big", "zz"]) == {"a": b"new", "big": value}
    assert c.incr("n", 1) is None
    c.set("n", b"41")
    assert c.incr("n", 1) == 42
    assert c.delete("a") is True
    c.close()


def test_pymemcache_without_client_certificate_is_refused(tls_server):
    host, port, d, need_cert = tls_server
    if not need_cert:
        pytest.skip("only with --tls-ca")
    c = Client((host, port), tls_context=context(d, False), default_noreply=False)
    # TLS 1.3: the refusal comes after the client's side of the handshake, on the first read.
    with pytest.raises((ssl.SSLError, MemcacheUnexpectedCloseError, ConnectionError)):
        c.set("a", b"x")
        c.get("a")


def test_pymemcache_suite_tls_test_with_each_client_class(tls_server):
    """pymemcache's own `test_tls` (test_integration.py; skipped upstream for want of a TLS
    server, and its certificates are not in the wheel), with each of its client classes."""
    from pymemcache.client.base import PooledClient
    from pymemcache.client.hash import HashClient

    host, port, d, need_cert = tls_server
    ctx = context(d, need_cert)
    for client in [
        Client((host, port), tls_context=ctx),
        PooledClient((host, port), tls_context=ctx),
        HashClient([(host, port)], tls_context=ctx),
    ]:
        client.flush_all()
        client.set(b"key", b"value", noreply=False)
        client.set(b"key2", b"value2", noreply=True)
        assert client.get(b"key") == b"value"
        assert client.get(b"key2") == b"value2"
        assert client.get_many([b"key", b"key2"]) == {b"key": b"value", b"key2": b"value2"}
        assert client.delete(b"key", noreply=False) is True
        assert client.get(b"key") is None
        client.close()
