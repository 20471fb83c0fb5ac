"""The read-only MCP server (issue 27 item 4; docs/api.md "MCP"), driven by the `mcp` SDK's
own client over real HTTP: `manage.py mcp_server` in its own process on loopback, against
the test database and the session's shared cache."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.urls import reverse
from mcp import Client

from demo.synthetic import (
    make_hardware,
    make_model,
    make_org,
    make_published_result,
    make_tier_set,
    synthetic_points,
)
from leaderboard.publishing import result_set_status
from tests.support.llamacpp import free_port
from tests.support.workers import spawn_in_group, stop_group, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = {
    "list_models",
    "list_hardware",
    "frontier",
    "result_provenance",
    "compare_iso_speed",
    "pair_history",
}


class McpProcess:
    def __init__(self, log_path: Path, workers: int = 1, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log_path = log_path
        args = [
            sys.executable,
            "manage.py",
            "mcp_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(workers),
        ]
        self.process = spawn_in_group(args, log_path, env=worker_env(**env))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mcp_server exited:\n{self.log()[-3000:]}")
            try:
                urllib.request.urlopen(self.url, timeout=5)
            except urllib.error.HTTPError:
                return  # answering (a GET without a session is refused) is enough
            except OSError:
                time.sleep(0.2)
                continue
            return
        self.stop()
        raise RuntimeError(f"mcp_server not ready:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_group(self.process, grace_s=20)


@pytest.fixture
def mcp_server(tmp_path):
    server = McpProcess(tmp_path / "mcp.log")
    yield server
    server.stop()


def call(url: str, tool: str, **arguments):
    async def go():
        async with Client(url) as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(go())


def data(result) -> object:
    assert not result.is_error, result.content
    structured = result.structured_content
    if isinstance(structured, dict) and set(structured) == {"result"}:
        return structured["result"]
    return structured if structured is not None else json.loads(result.content[0].text)


def error_text(result) -> str:
    assert result.is_error
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def lineup(transactional_db):
    model = make_model(name="MCP Model")
    gb300 = make_hardware(name="GB300 NVL72")
    mi355 = make_hardware(name="MI355X")
    tiers = make_tier_set()
    org = make_org(name="Vendor A")
    a = make_published_result(model=model, hardware=gb300, tier_set=tiers, org=org, label="A")
    b = make_published_result(
        model=model,
        hardware=gb300,
        tier_set=tiers,
        label="B",
        points=synthetic_points(single_agent_speed=240.0, knee=40.0),
    )
    c = make_published_result(model=model, hardware=mi355, tier_set=tiers, label="C")
    return model, gb300, mi355, a, b, c


def test_the_sdk_client_lists_read_only_tools(mcp_server, lineup):
    async def go():
        async with Client(mcp_server.url) as client:
            return await client.list_tools()

    tools = asyncio.run(go()).tools
    assert {t.name for t in tools} == TOOLS
    assert all(t.annotations and t.annotations.read_only_hint for t in tools)


def test_catalog_and_frontier_tools(mcp_server, lineup):
    model, gb300, mi355, a, b, c = lineup
    models = data(call(mcp_server.url, "list_models"))
    assert {m["slug"]: m["published_results"] for m in models}[model.slug] == 3
    systems = {h["slug"]: h for h in data(call(mcp_server.url, "list_hardware"))}
    assert systems[gb300.slug]["published_results"] == 2

    got = data(
        call(mcp_server.url, "frontier", model=model.slug, hardware=gb300.slug, tier="60 tok/s")
    )
    assert sorted(r["id"] for r in got["results"]) == sorted([a.pk, b.pk])
    assert got["tier"] == {"name": "60 tok/s", "min_p25_output_speed": 60}
    for row in got["results"]:
        stored = {r.pk: r for r in (a, b)}[row["id"]]
        assert row["max_agents_at_tier"] == stored.max_agents.get("60 tok/s")
        assert len(row["points"]) == len(stored.points)
        assert [p["concurrency"] for p in row["points"]] == sorted(
            p["concurrency"] for p in stored.points
        )
        assert all(p["meets_tier_speed"] == (p["p25_speed"] >= 60) for p in row["points"])


def test_bad_input_is_a_tool_error_naming_the_field(mcp_server, lineup):
    model, gb300, *_ = lineup
    text = error_text(call(mcp_server.url, "frontier", model=model.slug, hardware="nope"))
    assert "hardware" in text
    text = error_text(
        call(mcp_server.url, "frontier", model=model.slug, hardware=gb300.slug, tier="fast")
    )
    assert "tier" in text
    assert "result_id" in error_text(call(mcp_server.url, "result_provenance", result_id=999999))
    assert "model" in error_text(
        call(mcp_server.url, "pair_history", model="nope", hardware=gb300.slug)
    )


def test_provenance_compare_and_history(mcp_server, lineup, client):
    model, gb300, _, a, b, _ = lineup
    got = data(call(mcp_server.url, "result_provenance", result_id=a.pk))
    assert got["status"] == "published"
    assert got["provenance"]["submitter"] == "Vendor A"
    assert got["provenance"]["run_id"] == a.run_id
    a.refresh_from_db()
    assert got["receipt"] == (
        None
        if not a.receipt
        else {
            "envelope": a.receipt,
            "status_envelope": a.receipt_status or None,
            "api": reverse("public-api-result-receipt", args=[a.pk]),
        }
    )

    compared = data(
        call(
            mcp_server.url,
            "compare_iso_speed",
            base_result_id=a.pk,
            other_result_id=b.pk,
            speed=75.0,
        )
    )
    public = client.get(f"/api/v1/public/compare/?r={a.pk}&r={b.pk}&speed=75").json()
    assert compared["iso_speed"] == public["iso_speed"]
    assert any(row["speed"] == 75.0 for row in compared["iso_speed"])

    history = data(call(mcp_server.url, "pair_history", model=model.slug, hardware=gb300.slug))
    assert [r["id"] for r in history["results"]] == [a.pk, b.pk]
    assert all(r["status"] == "published" for r in history["results"])
    # a status change committed here is what the server's next answer shows
    result_set_status(result=b, to="invalidated", actor=None, reason="wrong weights")
    history = data(call(mcp_server.url, "pair_history", model=model.slug, hardware=gb300.slug))
    assert {r["id"]: (r["status"], r["status_reason"]) for r in history["results"]}[b.pk] == (
        "invalidated",
        "wrong weights",
    )
    got = data(call(mcp_server.url, "frontier", model=model.slug, hardware=gb300.slug))
    assert [r["id"] for r in got["results"]] == [a.pk]


def test_the_server_is_throttled_per_client_across_its_processes(tmp_path, lineup):
    """Two server processes on one port (uvicorn's workers share the socket): the count is
    the shared cache's, so the rate holds whichever process answers."""
    server = McpProcess(tmp_path / "mcp.log", workers=2, THROTTLE_ANON="5/hour")
    try:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        statuses = []
        for _ in range(12):
            request = urllib.request.Request(
                server.url,
                data=body,
                headers={
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    statuses.append((response.status, None))
            except urllib.error.HTTPError as exc:
                statuses.append((exc.code, exc.headers.get("Retry-After")))
        # five per hour: the readiness probe's request and four of these
        assert [s for s, _ in statuses] == [200] * 4 + [429] * 8, statuses
        assert int(statuses[4][1]) > 0
    finally:
        server.stop()
