"""The real llama.cpp server fixture: streaming, forced output length, prefix caching."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from runner.launchers.tiny_gguf import build_tiny_gguf, fetch_vocab_gguf

pytestmark = pytest.mark.llamacpp


def stream_chat(base_url: str, body: dict) -> list[dict]:
    """POST a streaming chat completion; the parsed SSE data events (without [DONE])."""
    req = urllib.request.Request(
        base_url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        raw = resp.read().decode()
    data = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def chat_body(messages: list[dict], max_tokens: int) -> dict:
    return {
        "model": "tiny",
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_server_lists_the_model_alias(llama_server) -> None:
    with urllib.request.urlopen(llama_server.base_url + "/v1/models", timeout=10) as resp:
        models = json.loads(resp.read())
    assert [m["id"] for m in models["data"]] == ["tiny"]


def test_streamed_chat_has_exactly_max_tokens_with_ignore_eos(llama_server) -> None:
    events = stream_chat(
        llama_server.base_url, chat_body([{"role": "user", "content": "Write a parser."}], 33)
    )
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 33
    content_events = [
        e for e in events if e.get("choices") and e["choices"][0]["delta"].get("content")
    ]
    assert len(content_events) > 1
    assert events[-1]["timings"]["predicted_n"] == 33


def test_repeated_prefix_reports_cached_tokens(llama_server) -> None:
    system = {"role": "system", "content": "session 8f3a: you are a coding agent. " * 40}
    first = stream_chat(
        llama_server.base_url, chat_body([system, {"role": "user", "content": "step one"}], 4)
    )
    second = stream_chat(
        llama_server.base_url, chat_body([system, {"role": "user", "content": "step two"}], 4)
    )
    assert first[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] < 50
    cached = second[-1]["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 0.8 * second[-1]["usage"]["prompt_tokens"]


def test_prompt_longer_than_a_slot_is_refused_with_http_400(llama_server) -> None:
    long_text = "token " * (llama_server.ctx_per_slot + 500)
    body = chat_body([{"role": "user", "content": long_text}], 4)
    with pytest.raises(urllib.error.HTTPError) as info:
        stream_chat(llama_server.base_url, body)
    assert info.value.code == 400


def test_server_killed_by_pid_stops_answering(llama_server_factory) -> None:
    server = llama_server_factory(n_parallel=1, ctx_per_slot=1024)
    assert server.alive()
    server.kill()
    assert not server.alive()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.base_url + "/v1/models", timeout=5)


def test_different_seeds_build_different_weights(tmp_path) -> None:
    vocab = fetch_vocab_gguf()
    a = build_tiny_gguf(tmp_path / "a.gguf", seed=1, vocab_path=vocab, name="t")
    b = build_tiny_gguf(tmp_path / "b.gguf", seed=2, vocab_path=vocab, name="t")
    c = build_tiny_gguf(tmp_path / "c.gguf", seed=1, vocab_path=vocab, name="t")
    assert a.read_bytes() == c.read_bytes()
    assert a.read_bytes() != b.read_bytes()
