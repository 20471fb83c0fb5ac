"""HttpTransport against a scripted loopback HTTP server (real sockets, real framing)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from agentperf.engine.client import HttpTransport
from agentperf.engine.http1 import Dechunker
from agentperf.engine.sse import ParseState, feed_sse, flush
from agentperf.engine.transport import (
    ERROR_CONNECT,
    ERROR_DISCONNECT,
    ERROR_HTTP_STATUS,
    ERROR_PROTOCOL,
    ERROR_TIMEOUT,
    ERROR_WRONG_LENGTH,
    Exchange,
    RequestSpec,
)
from tests.engine.sse_server import (
    CLOSE,
    LAST_CHUNK,
    ScriptServer,
    chat_delta,
    chat_stream,
    chunk,
    chunked_response,
    head,
    sse,
    usage_event,
)


def spec(target: int = 5, *, api: str = "chat", timeout_s: float = 30.0) -> RequestSpec:
    body: dict[str, Any] = {"model": "m", "max_tokens": target, "stream": True}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "hello"}]
    else:
        body["prompt"] = "hello"
    return RequestSpec(
        request_id="r1",
        api=api,  # type: ignore[arg-type]
        body=body,
        target_output_tokens=target,
        timeout_s=timeout_s,
    )


def run(
    responder: Callable[[dict[str, Any]], list[Any]],
    body: Callable[[HttpTransport, ScriptServer], Awaitable[Any]],
    *,
    use_uvloop: bool = False,
) -> Any:
    async def main() -> Any:
        server = ScriptServer(responder)
        url = await server.start()
        transport = HttpTransport(url)
        try:
            return await body(transport, server)
        finally:
            await transport.aclose()
            await server.stop()

    if use_uvloop:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    return asyncio.run(main())


def one(responder: Callable[[dict[str, Any]], list[Any]], s: RequestSpec | None = None) -> Exchange:
    async def body(t: HttpTransport, _: ScriptServer) -> Exchange:
        return await t.send(s or spec())

    result: Exchange = run(responder, body)
    return result


def test_chunked_stream_gives_content_usage_and_cached_tokens() -> None:
    ex = one(lambda r: chunked_response(chat_stream(5, prompt=40, cached=32)))
    assert ex.ok, ex.error_detail
    assert ex.content == "t0 t1 t2 t3 t4 "
    assert (ex.prompt_tokens, ex.completion_tokens, ex.cached_tokens) == (40, 5, 32)
    assert ex.n_output_events == 5
    assert ex.finish_reason == "length"
    assert ex.http_status == 200
    assert ex.t_first_ns is not None and ex.t_last_ns is not None
    assert ex.t_send_ns <= ex.t_first_ns <= ex.t_last_ns <= (ex.t_end_ns or 0)


def test_request_goes_to_the_chat_path_with_the_exact_body() -> None:
    async def body(t: HttpTransport, server: ScriptServer) -> dict[str, Any]:
        await t.send(spec(3))
        return server.requests[0]

    request = run(lambda r: chunked_response(chat_stream(3)), body)
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["max_tokens"] == 3
    assert request["body"]["messages"] == [{"role": "user", "content": "hello"}]


def test_content_length_framed_stream_is_read_to_its_length() -> None:
    payload = b"".join(chat_stream(4))
    ex = one(lambda r: [head(chunked=False, length=len(payload)), payload], spec(4))
    assert ex.ok, ex.error_detail
    assert ex.completion_tokens == 4
    assert ex.content == "t0 t1 t2 t3 "


def test_events_split_across_reads_are_reassembled() -> None:
    raw = b"".join(chunk(e) for e in chat_stream(6)) + LAST_CHUNK
    pieces: list[Any] = [head()]
    for i in range(0, len(raw), 7):  # 7-byte writes cut events and chunk-size lines
        pieces += [raw[i : i + 7], 0.0005]
    ex = one(lambda r: pieces, spec(6))
    assert ex.ok, ex.error_detail
    assert ex.content == "t0 t1 t2 t3 t4 t5 "
    assert ex.n_reads > 5


def test_first_token_time_is_the_read_with_the_first_visible_output() -> None:
    events = chat_stream(2)
    steps = [head(), chunk(events[0]), 0.05, *[chunk(e) for e in events[1:]], LAST_CHUNK]
    ex = one(lambda r: steps, spec(2))
    assert ex.ok, ex.error_detail
    assert ex.t_first_ns is not None
    # the role-only event arrived at once; visible output only after the 50 ms pause
    assert ex.t_first_ns - ex.t_send_ns >= 50_000_000


def test_reasoning_and_tool_call_deltas_count_as_visible_output() -> None:
    events = [
        chat_delta(reasoning="think"),
        chat_delta(tool='{"a":'),
        sse({"choices": [{"delta": {"reasoning": "more"}}]}),
        chat_delta("x"),
        usage_event(5, 4),
        sse(b"[DONE]"),
    ]
    ex = one(lambda r: chunked_response(events), spec(4))
    assert ex.ok, ex.error_detail
    assert ex.n_output_events == 4
    assert ex.reasoning == "thinkmore"
    assert ex.tool_calls_text == '{"a":'
    assert ex.content == "x"


def test_completions_api_reads_text_choices() -> None:
    events = [sse({"choices": [{"text": f"w{i}"}]}) for i in range(3)]
    events += [usage_event(2, 3), sse(b"[DONE]")]

    async def body(t: HttpTransport, server: ScriptServer) -> tuple[Exchange, str]:
        return await t.send(spec(3, api="completions")), server.requests[0]["path"]

    ex, path = run(lambda r: chunked_response(events), body)
    assert path == "/v1/completions"
    assert ex.ok, ex.error_detail
    assert ex.content == "w0w1w2"


def test_http_error_status_is_a_failed_request_with_the_body_excerpt() -> None:
    body = json.dumps({"error": {"message": "prompt exceeds the context size"}}).encode()
    ex = one(
        lambda r: [
            head(400, chunked=False, length=len(body), content_type="application/json"),
            body,
        ]
    )
    assert ex.error_class == ERROR_HTTP_STATUS
    assert ex.http_status == 400
    assert "exceeds the context size" in ex.error_detail


# vLLM 0.32's answer to a prompt longer than max_model_len, byte for byte (taken by hand from
# the tiny-vllm server, docs/engine.md "Error reasons")
VLLM_TOO_LONG = (
    b'{"error":{"message":"This model\'s maximum context length is 16384 tokens. However, '
    b"your prompt contains at least 16385 input tokens, which exceeds this limit even without "
    b"any output tokens. Please reduce the length of the input prompt. "
    b'(parameter=input_tokens, value=16385)","type":"BadRequestError","param":"input_tokens",'
    b'"code":400}}'
)


def error_response(status: int, body: bytes, content_type: str) -> Callable[..., list[Any]]:
    return lambda r: [
        head(
            status, chunked=False, length=len(body), content_type=content_type, connection="close"
        ),
        body,
    ]


def test_an_http_error_keeps_the_servers_message_from_its_json_body() -> None:
    ex = one(error_response(400, VLLM_TOO_LONG, "application/json"))
    assert ex.error_class == ERROR_HTTP_STATUS
    assert ex.error_detail == (
        "HTTP 400: This model's maximum context length is 16384 tokens. However, your prompt "
        "contains at least 16385 input tokens, which exceeds this limit even without any output "
        "tokens. Please reduce the length of the input prompt. (parameter=input_tokens, "
        "value=16385)"
    )


def test_an_http_error_without_a_json_body_keeps_the_bodys_start_on_one_line() -> None:
    page = b"<html>\n<h1>502 Bad Gateway</h1>\n" + b"x" * 3000 + b"</html>"
    ex = one(error_response(502, page, "text/html"))
    assert ex.error_detail.startswith("HTTP 502: <html> <h1>502 Bad Gateway</h1> xxx")
    assert len(ex.error_detail) == len("HTTP 502: ") + 500


def test_a_long_server_message_is_bounded() -> None:
    body = json.dumps({"error": {"message": "too long " * 1000}}).encode()
    ex = one(error_response(400, body, "application/json"))
    assert ex.error_detail.startswith("HTTP 400: too long too long")
    assert len(ex.error_detail) == len("HTTP 400: ") + 500


def test_an_error_object_without_a_message_is_kept_whole() -> None:
    body = json.dumps({"detail": [{"loc": ["body", "max_tokens"], "msg": "bad"}]}).encode()
    ex = one(error_response(422, body, "application/json"))
    assert ex.error_detail == 'HTTP 422: {"detail":[{"loc":["body","max_tokens"],"msg":"bad"}]}'


def test_error_event_inside_the_stream_is_a_protocol_failure() -> None:
    events = [chat_delta("a"), sse({"error": {"message": "engine overloaded"}})]
    ex = one(lambda r: chunked_response(events))
    assert ex.error_class == ERROR_PROTOCOL
    assert "engine overloaded" in ex.error_detail


def test_disconnect_mid_stream_is_a_disconnect_failure() -> None:
    events = chat_stream(5)[:3]
    ex = one(lambda r: [head(), *[chunk(e) for e in events], 0.01, CLOSE])
    assert ex.error_class == ERROR_DISCONNECT
    assert ex.content == "t0 t1 "  # what arrived is still recorded


def test_output_of_the_wrong_length_is_a_failed_request() -> None:
    ex = one(lambda r: chunked_response(chat_stream(4)), spec(5))
    assert ex.error_class == ERROR_WRONG_LENGTH
    assert ex.completion_tokens == 4


def test_stream_without_usage_is_a_protocol_failure() -> None:
    ex = one(lambda r: chunked_response([chat_delta("a"), sse(b"[DONE]")]), spec(1))
    assert ex.error_class == ERROR_PROTOCOL
    assert "usage" in ex.error_detail


def test_refused_connection_is_a_connect_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> Exchange:
        t = HttpTransport(f"http://127.0.0.1:{port}/v1")
        try:
            return await t.send(spec())
        finally:
            await t.aclose()

    ex = asyncio.run(main())
    assert ex.error_class == ERROR_CONNECT
    assert ex.t_end_ns is not None


def test_a_server_that_stops_sending_gives_a_timeout_failure() -> None:
    ex = one(lambda r: [head(), chunk(chat_delta("a")), 30.0], spec(timeout_s=0.2))
    assert ex.error_class == ERROR_TIMEOUT


def test_keep_alive_connection_is_reused_between_requests() -> None:
    async def body(t: HttpTransport, server: ScriptServer) -> tuple[list[bool], int]:
        oks = [(await t.send(spec(3))).ok for _ in range(3)]
        return oks, server.connections

    oks, connections = run(lambda r: chunked_response(chat_stream(3)), body)
    assert oks == [True, True, True]
    assert connections == 1


def test_pooled_connection_closed_by_the_server_is_replaced_transparently() -> None:
    def responder(r: dict[str, Any]) -> list[Any]:
        return [*chunked_response(chat_stream(2)), 0.01, CLOSE]

    async def body(t: HttpTransport, server: ScriptServer) -> tuple[list[bool], int]:
        first = await t.send(spec(2))
        await asyncio.sleep(0.05)  # let the server's close arrive
        second = await t.send(spec(2))
        return [first.ok, second.ok], server.connections

    oks, connections = run(responder, body)
    assert oks == [True, True]
    assert connections == 2


def test_many_concurrent_streams_each_get_their_own_answer() -> None:
    def responder(r: dict[str, Any]) -> list[Any]:
        n = r["body"]["max_tokens"]
        return chunked_response(chat_stream(n), gap_s=0.001)

    async def body(t: HttpTransport, _: ScriptServer) -> list[int | None]:
        results = await asyncio.gather(*(t.send(spec(n)) for n in range(1, 33)))
        assert all(r.ok for r in results)
        return [r.completion_tokens for r in results]

    assert run(responder, body) == list(range(1, 33))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 12),
    cuts=st.lists(st.integers(1, 400), max_size=30),
    crlf=st.booleans(),
)
def test_parsing_does_not_depend_on_how_the_bytes_were_split(
    n: int, cuts: list[int], crlf: bool
) -> None:
    events = chat_stream(n, prompt=9, cached=3)
    if crlf:
        events = [e.replace(b"\n", b"\r\n") for e in events]
    raw = b"".join(chunk(e) for e in events) + LAST_CHUNK
    positions = sorted({c % len(raw) for c in cuts} | {0, len(raw)})
    pieces = [raw[a:b] for a, b in zip(positions, positions[1:], strict=False)]
    dechunker = Dechunker()
    state = ParseState(api="chat")
    for i, piece in enumerate(pieces):
        feed_sse(state, i, dechunker.feed(piece))
    flush(state)
    assert dechunker.done
    assert state.n_output_events == n
    assert "".join(state.content or []) == "".join(f"t{i} " for i in range(n))
    assert state.usage == {
        "prompt_tokens": 9,
        "completion_tokens": n,
        "prompt_tokens_details": {"cached_tokens": 3},
    }
    assert state.done_marker


def test_the_client_works_the_same_on_uvloop() -> None:
    def responder(r: dict[str, Any]) -> list[Any]:
        n = r["body"]["max_tokens"]
        if n == 3:
            return [head(), *[chunk(e) for e in chat_stream(3)[:2]], 0.01, CLOSE]
        return chunked_response(chat_stream(n, cached=7), gap_s=0.001)

    async def body(t: HttpTransport, server: ScriptServer) -> list[Exchange]:
        return [await t.send(spec(5)), await t.send(spec(5)), await t.send(spec(3))]

    ok, again, cut = run(responder, body, use_uvloop=True)
    assert ok.ok and again.ok, (ok.error_detail, again.error_detail)
    assert ok.cached_tokens == 7 and ok.content == "t0 t1 t2 t3 t4 "
    assert cut.error_class == ERROR_DISCONNECT


def test_a_long_stream_is_parsed_while_it_streams_and_gives_the_same_answer(monkeypatch) -> None:
    """Beyond COMPACT_BYTES held, the reads so far are parsed and dropped (a shard with
    thousands of agents would otherwise hold every stream's whole answer); the answer, its
    counts and its first/last stamps are those of one parse at the end."""
    import agentperf.engine.http1 as http1

    n = 600  # ~60 KB of events, one read each (a gap between writes)
    steps = lambda r: chunked_response(chat_stream(n), gap_s=0.001)  # noqa: E731
    monkeypatch.setattr(http1, "COMPACT_BYTES", 1 << 30)
    whole = one(steps, spec(n))
    monkeypatch.setattr(http1, "COMPACT_BYTES", 4096)
    early = one(steps, spec(n))
    for ex in (whole, early):
        assert ex.ok, ex.error_detail
        assert ex.n_output_events == n and ex.completion_tokens == n
        assert ex.content == "".join(f"t{i} " for i in range(n))
    assert "reads_parsed_early" not in whole.extra
    assert early.extra["reads_parsed_early"] > n // 2  # most reads parsed before the end
    assert early.n_reads >= n and early.extra["sse_events"] == whole.extra["sse_events"]
    assert early.t_send_ns < early.t_first_ns < early.t_last_ns <= (early.t_end_ns or 0)
