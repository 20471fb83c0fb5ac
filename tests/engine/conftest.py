"""Engine test fixtures: a real llama.cpp server (xllamacpp) with a tiny GGUF model.

The server fixtures are session-scoped (the model is cached on disk between runs; starting a
server takes a few seconds). Tests that use them are marked ``llamacpp``. Reusable helpers
live in tests/support/llamacpp.py (the server) and runner/launchers/tiny_gguf.py (the model)
so other test folders can import them. The sharded-trial tests' generated dataset is
session-scoped too (generated once, not once per module that uses it).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentperf.engine.trajectory import load_dataset, save_dataset
from runner.launchers.tiny_gguf import tiny_gguf
from tests.support.llamacpp import LlamaServer, start_llama_server

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_CAP = 256  # tokens: under a second at the loopback stub's 300 tok/s


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny llama GGUF (seed 0), built once and cached."""
    return tiny_gguf(seed=0)


@pytest.fixture(scope="session")
def llama_server(tiny_model_path: Path, tmp_path_factory) -> Iterator[LlamaServer]:
    """A llama.cpp server with 2 slots of 4096 tokens, one thread, for the whole session."""
    server = start_llama_server(
        tiny_model_path,
        n_parallel=2,
        ctx_per_slot=4096,
        n_threads=1,
        log_dir=tmp_path_factory.mktemp("llama-server"),
    )
    yield server
    server.stop()


@pytest.fixture
def llama_server_factory(tiny_model_path: Path, tmp_path) -> Iterator:
    """Start private servers (e.g. to kill one mid-stream); all are stopped at teardown."""
    started: list[LlamaServer] = []

    def start(**kwargs) -> LlamaServer:
        kwargs.setdefault("log_dir", tmp_path)
        server = start_llama_server(kwargs.pop("model", tiny_model_path), **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def generated_dataset_path(tmp_path_factory) -> Path:
    """The sharded-trial tests' dataset (tests/engine/test_shards.py and the modules that
    share its fixtures) as generated: answers up to 8192 tokens. One per session."""
    path = tmp_path_factory.mktemp("shards") / "ds.jsonl.gz"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "agentperf.engine",
            "dataset",
            "generate",
            "--seed",
            "1",
            "--trajectories",
            "20",
            "--stdlib-only",
            "--out",
            str(path),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return path


@pytest.fixture(scope="session")
def dataset_path(generated_dataset_path) -> Path:
    """The generated dataset with answers of at most OUTPUT_CAP tokens: a trial waits for
    every request sent in its window (the drain, docs/engine.md "Window"), and the generated
    answers reach 8192 tokens, 27 s at the stub's 300 tok/s; no test that uses this one
    looks at the answers' lengths."""
    path = generated_dataset_path.with_name("ds-capped.jsonl.gz")
    full = load_dataset(generated_dataset_path)
    capped = tuple(
        dataclasses.replace(
            t,
            turns=tuple(
                dataclasses.replace(
                    turn, target_output_tokens=min(turn.target_output_tokens, OUTPUT_CAP)
                )
                for turn in t.turns
            ),
        )
        for t in full.trajectories
    )
    save_dataset(path, dataclasses.replace(full, trajectories=capped))
    return path
