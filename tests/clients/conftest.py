"""Start the real `kura` binary on a free loopback port for client-library tests."""
import os
import subprocess
import tempfile

import pytest

KURA = os.environ.get("KURA_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "target", "debug", "kura"))


@pytest.fixture
def server(request):
    """Yield (host, port) of a fresh `kura serve` on an on-disk database (or the database name
    a test gives with indirect parametrization); stop it afterwards."""
    name = getattr(request, "param", "c.kh")
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [KURA, "serve", name, "--port", "0", "--threads", "2"],
            cwd=d,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        try:
            addr = None
            for line in proc.stderr:  # wait for readiness, never sleep
                if "listening on " in line:
                    addr = line.split("listening on ")[1].split()[0]
                    break
            assert addr, "kura serve exited before listening"
            host, port = addr.rsplit(":", 1)
            yield host, int(port)
        finally:
            proc.terminate()
            assert proc.wait(timeout=10) == 0, "kura serve did not stop cleanly on SIGTERM"
