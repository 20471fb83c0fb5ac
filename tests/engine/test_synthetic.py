"""The seeded synthetic generator and its corpus."""

from __future__ import annotations

import pytest

from agentperf.engine.datasets.corpus import build_corpus, split_pieces
from agentperf.engine.datasets.stats import dataset_stats, quantile
from agentperf.engine.datasets.synthetic import generate_dataset
from agentperf.engine.tokens import TokenCounter


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture(scope="module")
def corpus(counter):
    return build_corpus(counter)


@pytest.fixture(scope="module")
def dataset(corpus, counter):
    return generate_dataset(seed=0, trajectories=200, corpus=corpus, counter=counter)


def test_same_seed_gives_the_same_digest_and_another_seed_differs(corpus, counter) -> None:
    a = generate_dataset(seed=7, trajectories=12, corpus=corpus, counter=counter)
    b = generate_dataset(seed=7, trajectories=12, corpus=corpus, counter=counter)
    c = generate_dataset(seed=8, trajectories=12, corpus=corpus, counter=counter)
    assert a.digest() == b.digest()
    assert a.digest() != c.digest()


def test_generated_dataset_has_the_published_shape(dataset) -> None:
    stats = dataset_stats(dataset)
    assert stats.input_tokens.min >= 5_000
    assert stats.input_tokens.max <= 131_072
    assert 20_000 <= stats.input_tokens.mean <= 34_000
    assert 120 <= stats.output_tokens.p50 <= 180
    assert 1_600 <= stats.output_tokens.p95 <= 2_500
    assert 0.8 <= stats.tool_delay_s.p50 <= 1.25
    assert stats.turns_per_trajectory.max <= 200
    assert stats.turns_per_trajectory.max >= 60
    assert len(stats.languages) >= 12


def test_every_generated_trajectory_validates(dataset) -> None:
    dataset.validate()
    assert all(t.metadata["language"] for t in dataset.trajectories)


def test_stored_message_tokens_equal_a_fresh_count(dataset, counter) -> None:
    checked = 0
    for trajectory in dataset.trajectories[:15]:
        for turn in trajectory.turns:
            assert turn.message_tokens is not None
            for message, n in zip(turn.new_messages, turn.message_tokens, strict=True):
                assert counter.count_message(message) == n
                checked += 1
    assert checked > 100


def test_some_sessions_drop_an_ephemeral_reminder(dataset) -> None:
    dropped = 0
    for trajectory in dataset.trajectories:
        prompts = list(trajectory.iter_prompts())
        for k in range(1, len(prompts)):
            if trajectory.turns[k].keep_messages < len(prompts[k - 1]):
                dropped += 1
    assert dropped > 0


def test_pieces_split_only_where_token_counts_add_up(counter) -> None:
    text = "def f():\n\n    return 1\n\n\nclass A:\n    pass\n" * 20
    pieces = split_pieces(text, lines_per_piece=3)
    assert "".join(pieces) == text
    assert len(pieces) > 10
    assert all(not p.startswith("\n") for p in pieces)
    assert sum(counter.count(p) for p in pieces) == counter.count(text)


def test_corpus_without_discovery_translates_stdlib_text(counter) -> None:
    corpus = build_corpus(counter, ["python", "rust"], discover=False)
    rust = corpus.language("rust")
    assert rust.source == "translated-stdlib"
    first_line = rust.files[0].pieces[0].text.splitlines()[0]
    assert first_line.startswith("// ")


def test_quantile_interpolates_like_numpy() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([0.0, 10.0], 0.95) == pytest.approx(9.5)


def test_the_decode_heavy_variant_has_its_stated_output_distribution(corpus, counter) -> None:
    # docs/datasets.md "Decode-heavy variant": lognormal, median 5,000, sigma 0.6, clamped to
    # [2,048, 16,384]; a median of 8 turns; the context stays within 131,072 tokens
    from agentperf.engine.datasets.synthetic import DECODE_HEAVY, SHAPES

    heavy = generate_dataset(
        seed=0, trajectories=150, corpus=corpus, counter=counter, params=SHAPES["decode-heavy"]
    )
    heavy.validate()
    stats = dataset_stats(heavy)
    assert stats.output_tokens.min >= 2_048 and stats.output_tokens.max <= 16_384
    assert 4_300 <= stats.output_tokens.p50 <= 5_800
    assert 10_000 <= stats.output_tokens.p95 <= 16_384
    assert 6 <= stats.turns_per_trajectory.p50 <= 10
    assert stats.input_tokens.max <= 131_072
    for t in heavy.trajectories:
        for k, turn in enumerate(t.turns):
            prompt = sum(t.prompt_message_tokens(k) or ())
            assert prompt + turn.target_output_tokens <= DECODE_HEAVY.context_tokens
    # the shape is recorded in the file; the coding shape's files are unchanged (no key)
    assert heavy.metadata["shape"]["output_min"] == 2_048
    coding = generate_dataset(seed=0, trajectories=2, corpus=corpus, counter=counter)
    assert "shape" not in coding.metadata
    # seeded like the coding shape: the same seed, the same bytes
    again = generate_dataset(
        seed=0, trajectories=150, corpus=corpus, counter=counter, params=DECODE_HEAVY
    )
    assert again.digest() == heavy.digest()
