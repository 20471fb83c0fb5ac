"""The context pre-flight where the server has no tokenizer endpoint (the simulator's HTTP
server, whose /v1/models publishes max_model_len) and where nothing answers
(docs/engine.md "Context pre-flight"); the real llama.cpp cases are in
tests/engine/test_preflight_llamacpp.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from agentperf.engine.preflight import check_context, http_fetch
from agentperf.engine.replay import NAMESPACE_TOKENS, ReplayConfig
from agentperf.engine.tokens import count_message_tokens
from agentperf.engine.trajectory import Message, Trajectory, Turn
from runner.twin_server.server import ServerProcess, start_server

CONTEXT = 8192  # the local-cpu-llamacpp profile's context_length


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    started = start_server("local-cpu-llamacpp")
    yield started
    started.stop()


def one_turn(name: str, local_tokens: int, output: int) -> Trajectory:
    """A one-turn trajectory whose prompt counts ``local_tokens`` locally, namespace line
    included (a repeated one-token word)."""
    message: Message = {"role": "user", "content": ""}
    words = local_tokens - NAMESPACE_TOKENS
    while True:
        message = {"role": "user", "content": "token " * words}
        count = count_message_tokens(message)
        if count + NAMESPACE_TOKENS == local_tokens:
            break
        words += local_tokens - NAMESPACE_TOKENS - count
    return Trajectory(name, (Turn(0, (message,), output, message_tokens=(count,)),))


def test_without_a_tokenizer_only_turns_over_by_more_than_the_margin_are_refused(
    server: ServerProcess,
) -> None:
    trajectories = [
        one_turn("over", int(CONTEXT * 1.4), 100),  # 0.75 of it is still past the limit
        one_turn("near-over", CONTEXT - 50, 100),  # over by local count, within 25 %
        one_turn("near-under", CONTEXT - 1000, 100),  # under, within 25 %
        one_turn("under", CONTEXT // 2, 100),
    ]
    url = server.base_url
    check = check_context(
        trajectories, ReplayConfig(model="smollm2-135m"), http_fetch(url), base_url=url
    )
    assert check.context is not None
    assert (check.context.tokens, check.context.source) == (
        CONTEXT,
        "GET /v1/models: max_model_len",
    )
    assert check.server_counted == 0 and check.ratio is None  # the simulator has no /tokenize
    assert [(t.trajectory_id, t.counted_by) for t in check.unfit] == [("over", "local")]
    assert check.unfit[0].prompt_tokens == int(CONTEXT * 1.4)
    assert check.uncertain == 2  # near-over and near-under: not refused, said
    assert check.line().endswith(
        "4 turns, by their local count (±25%: the server has no tokenizer endpoint); "
        "2 near the limit may not fit"
    )


def test_a_server_that_does_not_answer_is_not_checked_and_the_line_says_why() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # nothing listens there
    check = check_context(
        [one_turn("t", 100, 8)], ReplayConfig(model="m"), http_fetch(url), base_url=url
    )
    assert check.context is None and check.fits
    line = check.line()
    assert line.startswith("context pre-flight: not checked, the server did not answer: ")
    assert "GET /v1/models: " in line and "GET /props: " in line
    assert "Connection refused" in line
