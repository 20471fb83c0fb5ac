"""The context pre-flight and the error reasons against a REAL llama.cpp server (xllamacpp,
the tiny GGUF, one slot of 1,024 tokens), through the engine CLI: a turn the slot cannot hold
is named before any load is sent; sent anyway (``--no-preflight``), its failed records keep
the server's own reason and the trial's summary, the CLI and the report list it with its
count; the pool worker fails such a run before any load (docs/engine.md "Context
pre-flight", "Error reasons")."""

from __future__ import annotations

import html
import io
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentperf.engine import cli, rawrecords
from agentperf.engine.reasons import normalise_reason
from agentperf.engine.tokens import count_message_tokens
from agentperf.engine.trajectory import (
    Dataset,
    Message,
    Trajectory,
    Turn,
    dataset_to_bytes,
    save_dataset,
)
from runner.launchers import Endpoint
from runner.worker.director import RunDirector
from runner.worker.reporter import MemoryReporter
from tests.support.llamacpp import LlamaServer, start_llama_server
from tests.verification.harness import run_spec

pytestmark = pytest.mark.llamacpp
CTX = 1024  # tokens per slot: prompt + answer of one request

# llama.cpp's refusal of a prompt longer than the slot, its numbers as N
TOO_LONG = (
    "HTTP 400: request (N tokens) exceeds the available context size (N tokens), try increasing it"
)


@pytest.fixture(scope="module")
def server(
    tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    started = start_llama_server(
        tiny_model_path,
        n_parallel=1,
        ctx_per_slot=CTX,
        n_threads=1,
        log_dir=tmp_path_factory.mktemp("llama-preflight"),
    )
    yield started
    started.stop()


def turn(keep: int, messages: list[Message], output: int) -> Turn:
    """A turn with the dataset's local (cl100k) counts, as imported datasets carry them."""
    return Turn(
        keep,
        tuple(messages),
        output,
        tool_delay_s=0.05,
        message_tokens=tuple(count_message_tokens(m) for m in messages),
    )


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def write(path: Path, trajectories: list[Trajectory]) -> Path:
    save_dataset(path, Dataset(name="preflight", version="1", trajectories=tuple(trajectories)))
    return path


def served_prompt_tokens(server: LlamaServer, messages: list[Message]) -> int:
    """The server's own prompt count from a one-token chat completion (usage), not from the
    tokenizer endpoints the pre-flight uses."""
    body = {"model": "tiny", "messages": messages, "max_tokens": 1, "stream": False}
    request = urllib.request.Request(
        server.base_url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return int(json.loads(response.read())["usage"]["prompt_tokens"])


def engine_trial(server: LlamaServer, dataset: Path, out: Path, *extra: str) -> tuple[int, str]:
    argv = [
        "trial", "--base-url", f"{server.base_url}/v1", "--model", "tiny",
        "--dataset", str(dataset), "--accelerators", "1", "--concurrency", "1",
        "--warmup", "0", "--duration", "2", "--min-requests", "1", "--no-namespace",
        "--out", str(out), *extra,
    ]  # fmt: skip
    stdout = io.StringIO()
    code = cli.main(argv, out=stdout)
    return code, stdout.getvalue()


def test_the_preflight_names_the_turns_the_slot_cannot_hold_and_sends_nothing(
    server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edge = [{"role": "system", "content": "You review code. " * 150}, user("Fix the parser.")]
    prompt = served_prompt_tokens(server, edge)
    assert 300 < prompt < CTX - 100
    dataset = write(
        tmp_path / "ds.jsonl.gz",
        [
            Trajectory("short", (turn(0, [user("Fix it.")], 8), turn(1, [user("More.")], 8))),
            Trajectory("long", (turn(0, [user("Start.")], 8), turn(0, [user("token " * 1500)], 8))),
            # the same prompt: an answer that fills the slot exactly fits, one more does not
            Trajectory("edge-fits", (turn(0, edge, CTX - prompt),)),
            Trajectory("edge-over", (turn(0, edge, CTX - prompt + 1),)),
        ],
    )
    out = tmp_path / "refused"
    code, _ = engine_trial(server, dataset, out)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "2 of 6 turns cannot fit the server's context of 1,024 tokens per request" in err
    assert "GET /v1/models: meta.n_ctx, per slot" in err
    assert "long turn 1 (longest: turn 1," in err
    assert (
        f"edge-over turn 0 (longest: turn 0, {prompt:,} prompt + {CTX - prompt + 1:,} answer = "
        f"{CTX + 1:,} tokens, the server's count)" in err
    )
    assert "edge-fits" not in err and "short" not in err
    assert "--no-preflight" in err
    assert not out.exists()  # no trial ran

    # what the server does with the two edge turns: the pre-flight's boundary is the server's
    fits = write(
        tmp_path / "fits.jsonl.gz", [Trajectory("edge-fits", (turn(0, edge, CTX - prompt),))]
    )
    code, stdout = engine_trial(server, fits, tmp_path / "fits")
    assert code == 0, capsys.readouterr().err
    assert (
        "context pre-flight: every turn fits the server's context of 1,024 tokens (GET "
        "/v1/models: meta.n_ctx, per slot); 1 turns, 1 counted by the server's tokenizer"
    ) in stdout
    records = rawrecords.read(str(tmp_path / "fits" / "requests.jsonl"))
    assert records and all(r.ok and r.n_in == prompt and r.n_out == CTX - prompt for r in records)
    over = write(
        tmp_path / "over.jsonl.gz", [Trajectory("edge-over", (turn(0, edge, CTX - prompt + 1),))]
    )
    code, stdout = engine_trial(server, over, tmp_path / "over")
    assert code == 2
    code, stdout = engine_trial(server, over, tmp_path / "over", "--no-preflight")
    assert code == 0
    records = rawrecords.read(str(tmp_path / "over" / "requests.jsonl"))
    # the server cut every answer short by one token: the context is full
    assert records and all(r.error_class == "wrong_length" for r in records)
    assert all(r.n_in == prompt and r.n_out == CTX - prompt for r in records)


def test_sent_anyway_the_failed_requests_keep_the_servers_reason_and_the_summary_counts_it(
    server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two turns longer than the slot, of different lengths: one reason, two sets of numbers
    long = Trajectory(
        "too-long",
        (turn(0, [user("token " * 1500)], 8), turn(1, [user("more " * 300)], 8)),
    )
    dataset = write(tmp_path / "long.jsonl.gz", [long])
    code, _ = engine_trial(server, dataset, tmp_path / "refused")
    assert code == 2
    assert "too-long turns 0–1" in capsys.readouterr().err

    out = tmp_path / "sent"
    code, stdout = engine_trial(server, dataset, out, "--no-preflight")
    assert code == 0, capsys.readouterr().err
    records = rawrecords.read(str(out / "requests.jsonl"))
    details = {r.error_detail for r in records}
    assert all(not r.ok and r.http_status == 400 for r in records)
    assert all(
        re.fullmatch(
            r"HTTP 400: request \(\d+ tokens\) exceeds the available context size "
            r"\(1024 tokens\), try increasing it",
            d,
        )
        for d in details
    ), details
    assert len(details) == 2  # the two prompts' own sizes
    assert {normalise_reason(d) for d in details} == {TOO_LONG}

    summary: dict[str, Any] = json.loads((out / "trial.json").read_text())["summary"]
    failed = summary["failed"]
    assert failed == summary["requests"] > 1
    assert summary["error_reasons"] == [
        {
            "error_class": "http_status",
            "reason": TOO_LONG,
            "count": failed,
            "example": summary["error_reasons"][0]["example"],
        }
    ]
    assert summary["error_reasons"][0]["example"] in details
    example = summary["error_reasons"][0]["example"]
    assert f"  {failed} failed (http_status): {example}" in stdout.splitlines()

    assert cli.main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<h2>Error reasons</h2>" in page
    assert (
        f'<td>{failed}</td><td>http_status</td><td class="reason">{html.escape(example)}</td>'
        in page
    )


class AttachedLlama:
    """The test's llama.cpp server as an attached deployment (nothing launched here)."""

    kind = "attached"

    def __init__(self, server: LlamaServer) -> None:
        self.server = server
        self.devices = None

    def start(self) -> Endpoint:
        return Endpoint(
            served_model_name="tiny",
            base_url=f"{self.server.base_url}/v1",
            info={"launcher": "attached", "models": ["tiny"]},
        )

    def stop(self) -> None:
        pass

    def log_bytes(self) -> bytes:
        return b""

    def check(self) -> None:
        pass


def test_the_pool_worker_fails_the_run_naming_the_turns_before_any_load(
    server: LlamaServer, tmp_path: Path
) -> None:
    fits = Trajectory("fits", (turn(0, [user("Fix it.")], 8),))
    long = Trajectory("long", (turn(0, [user("Start.")], 8), turn(1, [user("token " * 1500)], 8)))
    dataset = Dataset(name="preflight", version="1", trajectories=(fits, long))
    data = dataset_to_bytes(dataset)
    spec = run_spec(dataset, data, cap=2, max_trials=1)
    reporter = MemoryReporter(dataset_bytes=data)
    launcher = AttachedLlama(server)
    outcome = RunDirector(spec, reporter, work_dir=str(tmp_path), launcher=launcher).run()
    assert outcome["status"] == "failed"
    reason = outcome["reason"]
    assert reason.startswith(
        "context pre-flight: 1 of 3 turns cannot fit the server's context of 1,024 tokens"
    )
    assert "long turn 1 (longest: turn 1," in reason and "fits" not in reason
    [failure] = reporter.failures
    assert failure.reason == reason
    # nothing was sent: not even the qualification's probes
    assert reporter.qualifications == reporter.trials == reporter.completions == []
