"""Engine test fixtures: a real llama.cpp server (xllamacpp) with a tiny GGUF model.

The server fixtures are session-scoped (the model is cached on disk between runs; starting a
server takes a few seconds). Tests that use them are marked ``llamacpp``. Reusable helpers
live in tests/support/llamacpp.py (the server) and runner/launchers/tiny_gguf.py (the model)
so other test folders can import them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.launchers.tiny_gguf import tiny_gguf
from tests.support.llamacpp import LlamaServer, start_llama_server


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
