"""The window's /metrics counters of a deployment served by several servers behind one
router (docs/metrics.md "Cache truth"): each server counts only the requests it served, so
the deployment's counters are the sum over the servers, never the router's one answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentperf.engine.cachetruth import AGREES, CacheTruth, with_counters
from runner.launchers import Endpoint
from runner.worker.trials import scrape_counters


def serve_metrics(body: str) -> ThreadingHTTPServer:
    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def vllm_metrics(hits: int, queries: int, accept: float) -> str:
    return (
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        f'vllm:prefix_cache_hits_total{{engine="0"}} {hits}\n'
        f'vllm:prefix_cache_queries_total{{engine="0"}} {queries}\n'
        f"sglang:spec_accept_length {accept}\n"
    )


@pytest.fixture
def servers() -> Iterator[list[ThreadingHTTPServer]]:
    running = [
        serve_metrics(vllm_metrics(300, 1000, 2.0)),
        serve_metrics(vllm_metrics(100, 1000, 4.0)),
    ]
    yield running
    for server in running:
        server.shutdown()
        server.server_close()


def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_counters_are_summed_over_the_servers_behind_a_router_and_gauges_averaged(servers):
    # base_url is the router: it answers one server's figures, never the deployment's
    endpoint = Endpoint(
        served_model_name="m",
        base_url=url(servers[0]) + "/v1",
        metrics_urls=tuple(url(s) for s in servers),
    )
    total = scrape_counters(endpoint)
    assert total["vllm:prefix_cache_hits"] == 400
    assert total["vllm:prefix_cache_queries"] == 2000
    assert total["sglang:spec_accept_length"] == 3.0
    alone = scrape_counters(Endpoint(served_model_name="m", base_url=url(servers[0]) + "/v1"))
    assert alone["vllm:prefix_cache_hits"] == 300


def test_the_summed_window_agrees_with_the_requests_where_one_servers_counters_would_not():
    # 2,000 prompt tokens of which the requests report 400 cached: 20 %, the summed
    # counters' share too; one server alone (300 of 1,000) would read as 30 %
    truth = CacheTruth(
        verdict="pass",
        reasons=[],
        requests=4,
        reporting=4,
        source="usage",
        prompt_tokens=2000,
        theoretical_tokens=1800,
        observed_tokens=400,
        slack_tokens=0,
        ratio=400 / 1800,
        theoretical_share=0.9,
        observed_share=0.2,
        requests_over_bound=0,
        examples=[],
    )
    start = {"vllm:prefix_cache_hits": 0.0, "vllm:prefix_cache_queries": 0.0}
    summed = with_counters(
        truth, start, {"vllm:prefix_cache_hits": 400.0, "vllm:prefix_cache_queries": 2000.0}
    )
    assert summed.counters.status == AGREES
    one = with_counters(
        truth, start, {"vllm:prefix_cache_hits": 300.0, "vllm:prefix_cache_queries": 1000.0}
    )
    assert one.counters.status != AGREES


def test_one_server_that_does_not_answer_fails_the_scrape_rather_than_a_partial_sum(servers):
    gone = serve_metrics("")
    dead = url(gone)
    gone.shutdown()
    gone.server_close()
    endpoint = Endpoint(served_model_name="m", base_url=None, metrics_urls=(url(servers[0]), dead))
    with pytest.raises(OSError):  # connection refused: the whole scrape fails
        scrape_counters(endpoint)
