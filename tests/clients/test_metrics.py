"""Kura's Prometheus metrics parsed by Prometheus's own Python parser (prometheus_client), from
`--metrics-port` and from `GET /metrics` on the main port, with values that move after known
operations."""
import os
import subprocess
import tempfile
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymemcache.client.base import Client

from conftest import KURA


@pytest.fixture
def served():
    """Yield (main address, metrics address) of a fresh `kura serve` with --metrics-port."""
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [KURA, "serve", "m.kh", "--port", "0", "--threads", "2", "--metrics-port", "0"],
            cwd=d,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        try:
            main = metrics = None
            for line in proc.stderr:  # wait for readiness, never sleep
                if "listening on " in line:
                    main = line.split("listening on ")[1].split()[0]
                if "metrics served on http://" in line:
                    metrics = line.split("metrics served on http://")[1].split("/")[0]
                    break
            assert main and metrics, "kura serve exited before listening"
            yield main, metrics
        finally:
            proc.terminate()
            assert proc.wait(timeout=10) == 0


def scrape(addr):
    """Every sample of a scrape: {(name, sorted labels): value}, and the families' types."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types


def test_a_scrape_parses_and_moves_after_known_operations(served):
    main, metrics = served
    before, types = scrape(metrics)
    # The parser strips _total from a counter family's name; its samples keep it.
    assert types["kura_commands"] == "counter"
    assert types["kura_request_duration_seconds"] == "histogram"
    assert types["kura_current_connections"] == "gauge"
    assert types["kura_connections"] == "counter"  # kura_connections_total
    assert before[("kura_commands_total", (("command", "set"),))] == 0
    host, port = main.rsplit(":", 1)
    c = Client((host, int(port)))
    c.set("a", b"1")
    c.set("b", b"2")
    assert c.get("a") == b"1"
    assert c.get("nope") is None
    after, _ = scrape(metrics)
    assert after[("kura_commands_total", (("command", "set"),))] == 2
    assert after[("kura_commands_total", (("command", "get"),))] == 2
    assert after[("kura_hits_total", (("command", "get"),))] == 1
    assert after[("kura_misses_total", (("command", "get"),))] == 1
    assert after[("kura_records", ())] == 2
    assert after[("kura_request_duration_seconds_count", (("protocol", "memcached_text"),))] == 4
    inf = ("kura_request_duration_seconds_bucket", (("le", "+Inf"), ("protocol", "memcached_text")))
    assert after[inf] == 4
    assert after[("kura_received_bytes_total", ())] > before[("kura_received_bytes_total", ())]
    assert after[("kura_current_connections", ())] == 1
    # The main port's HTTP interface serves the same families.
    same, _ = scrape(main)
    assert {k[0] for k in same} == {k[0] for k in after}
    c.close()
