"""The workload model: trajectories of turns, datasets, their canonical encoding and files.

A trajectory is one recorded agentic coding session. Turn *k*'s prompt is turn *k-1*'s
prompt cut to ``keep_messages`` messages plus ``new_messages`` (docs/datasets.md "The turn
model"), so strict prefixes and ephemeral trailing messages are both expressed without
storing a prompt twice.

Canonical encoding (the input of the sha256 digest, see docs/datasets.md):

- every object is JSON with sorted keys, no whitespace (``","`` and ``":"`` separators),
  UTF-8 without ``\\u`` escapes for non-ASCII, no NaN/Infinity;
- the dataset encodes as a header line followed by one line per trajectory, each line
  ending in ``\\n``; the header holds ``format``, ``format_version``, ``name``,
  ``version``, ``metadata`` and ``trajectories`` (the count), never the digest itself.

A dataset file is exactly these lines, gzip-compressed (mtime 0, so the bytes are
deterministic too), with ``"digest"`` added to the header line.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentperf.files import write_atomically

FORMAT = "agentperf-dataset"
FORMAT_VERSION = 1

Message = dict[str, Any]


class DatasetError(ValueError):
    """A dataset or trajectory that is malformed, inconsistent, or fails its digest."""


def canonical_json(obj: Any) -> str:
    """The one JSON text of ``obj`` that the digest is computed over."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a trajectory: what is kept, what is appended, how long the answer is."""

    keep_messages: int
    new_messages: tuple[Message, ...]
    target_output_tokens: int
    tool_delay_s: float = 0.0
    recorded_prompt_tokens: int | None = None
    recorded_cached_tokens: int | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    message_tokens: tuple[int, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "keep_messages": self.keep_messages,
            "new_messages": list(self.new_messages),
            "target_output_tokens": self.target_output_tokens,
            "tool_delay_s": self.tool_delay_s,
            "recorded_prompt_tokens": self.recorded_prompt_tokens,
            "recorded_cached_tokens": self.recorded_cached_tokens,
            "tools": None if self.tools is None else list(self.tools),
            "message_tokens": None if self.message_tokens is None else list(self.message_tokens),
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        try:
            tools = data.get("tools")
            message_tokens = data.get("message_tokens")
            return cls(
                keep_messages=int(data["keep_messages"]),
                new_messages=tuple(data["new_messages"]),
                target_output_tokens=int(data["target_output_tokens"]),
                tool_delay_s=float(data.get("tool_delay_s", 0.0)),
                recorded_prompt_tokens=_opt_int(data.get("recorded_prompt_tokens")),
                recorded_cached_tokens=_opt_int(data.get("recorded_cached_tokens")),
                tools=None if tools is None else tuple(tools),
                message_tokens=None if message_tokens is None else tuple(message_tokens),
                metadata=dict(data.get("metadata") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"malformed turn: {exc!r}") from exc


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One agentic session; ``tools`` apply to every turn that does not override them."""

    id: str
    turns: tuple[Turn, ...]
    tools: tuple[dict[str, Any], ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    def prompt(self, k: int) -> list[Message]:
        """Turn ``k``'s full message list (a new list; the message dicts are shared)."""
        if not 0 <= k < len(self.turns):
            raise IndexError(f"turn {k} out of range for {len(self.turns)} turns")
        messages: list[Message] = []
        for turn in self.turns[: k + 1]:
            del messages[turn.keep_messages :]
            messages.extend(turn.new_messages)
        return messages

    def iter_prompts(self) -> Iterator[list[Message]]:
        """Every turn's prompt in order, in time linear in the messages produced."""
        messages: list[Message] = []
        for turn in self.turns:
            del messages[turn.keep_messages :]
            messages.extend(turn.new_messages)
            yield list(messages)

    def prompt_message_tokens(self, k: int) -> tuple[int, ...] | None:
        """Local token count of each message of turn ``k``'s prompt, if the dataset has them."""
        if not 0 <= k < len(self.turns):
            raise IndexError(f"turn {k} out of range for {len(self.turns)} turns")
        counts: list[int] = []
        for turn in self.turns[: k + 1]:
            if turn.message_tokens is None:
                return None
            del counts[turn.keep_messages :]
            counts.extend(turn.message_tokens)
        return tuple(counts)

    def iter_prompt_message_tokens(self) -> Iterator[tuple[int, ...] | None]:
        """Per-message token counts of every turn's prompt; None from the first gap on."""
        counts: list[int] | None = []
        for turn in self.turns:
            if counts is None or turn.message_tokens is None:
                counts = None
                yield None
                continue
            del counts[turn.keep_messages :]
            counts.extend(turn.message_tokens)
            yield tuple(counts)

    def prompt_tokens(self) -> list[int | None]:
        """Best known prompt size of each turn: local counts, else the recorded count."""
        sizes: list[int | None] = []
        for turn, counts in zip(self.turns, self.iter_prompt_message_tokens(), strict=True):
            sizes.append(sum(counts) if counts is not None else turn.recorded_prompt_tokens)
        return sizes

    def tools_for(self, k: int) -> tuple[dict[str, Any], ...]:
        override = self.turns[k].tools
        return self.tools if override is None else override

    def validate(self) -> None:
        """Raise DatasetError unless every turn can be materialised as written."""
        if not self.id:
            raise DatasetError("trajectory without an id")
        if not self.turns:
            raise DatasetError(f"trajectory {self.id}: no turns")
        length = 0
        for k, turn in enumerate(self.turns):
            where = f"trajectory {self.id} turn {k}"
            if turn.keep_messages < 0 or turn.keep_messages > length:
                raise DatasetError(
                    f"{where}: keep_messages={turn.keep_messages} but the previous prompt "
                    f"has {length} messages"
                )
            if turn.target_output_tokens < 1:
                raise DatasetError(f"{where}: target_output_tokens must be >= 1")
            if turn.tool_delay_s < 0:
                raise DatasetError(f"{where}: negative tool_delay_s")
            if turn.message_tokens is not None and len(turn.message_tokens) != len(
                turn.new_messages
            ):
                raise DatasetError(f"{where}: message_tokens and new_messages differ in length")
            for message in turn.new_messages:
                if not isinstance(message, dict) or "role" not in message:
                    raise DatasetError(f"{where}: a message without a role")
            length = turn.keep_messages + len(turn.new_messages)
            if length == 0:
                raise DatasetError(f"{where}: empty prompt")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "turns": [turn.to_dict() for turn in self.turns],
            "tools": list(self.tools),
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        try:
            return cls(
                id=str(data["id"]),
                turns=tuple(Turn.from_dict(t) for t in data["turns"]),
                tools=tuple(data.get("tools") or ()),
                metadata=dict(data.get("metadata") or {}),
            )
        except (KeyError, TypeError) as exc:
            raise DatasetError(f"malformed trajectory: {exc!r}") from exc


def common_prefix_length(a: Sequence[Message], b: Sequence[Message]) -> int:
    """Number of leading messages ``a`` and ``b`` have equal."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def turns_from_prompts(
    prompts: Iterable[Sequence[Message]],
    *,
    target_output_tokens: Sequence[int],
    tool_delays_s: Sequence[float] | None = None,
    recorded_prompt_tokens: Sequence[int | None] | None = None,
    recorded_cached_tokens: Sequence[int | None] | None = None,
    metadata: Sequence[dict[str, Any]] | None = None,
) -> tuple[Turn, ...]:
    """Turns whose prompts are exactly ``prompts``: each keeps its longest common prefix with
    the previous prompt and appends the rest."""
    turns: list[Turn] = []
    previous: Sequence[Message] = ()
    for k, prompt in enumerate(prompts):
        keep = common_prefix_length(previous, prompt)
        turns.append(
            Turn(
                keep_messages=keep,
                new_messages=tuple(prompt[keep:]),
                target_output_tokens=target_output_tokens[k],
                tool_delay_s=tool_delays_s[k] if tool_delays_s is not None else 0.0,
                recorded_prompt_tokens=(
                    recorded_prompt_tokens[k] if recorded_prompt_tokens is not None else None
                ),
                recorded_cached_tokens=(
                    recorded_cached_tokens[k] if recorded_cached_tokens is not None else None
                ),
                metadata=dict(metadata[k]) if metadata is not None else {},
            )
        )
        previous = prompt
    return tuple(turns)


def with_output_kind(trajectories: Sequence[Trajectory], kind: str) -> tuple[Trajectory, ...]:
    """The same sessions with every turn's text labelled ``kind`` (turn metadata
    ``output_kind``: ``tool_call``, ``code`` or ``prose``): a chat-like workload from a
    coding one. What a server makes of the label is its own affair; the simulator's draft
    acceptance depends on it (docs/simulator.md "Speculative decoding")."""
    return tuple(
        dataclasses.replace(
            t,
            turns=tuple(
                dataclasses.replace(u, metadata={**u.metadata, "output_kind": kind})
                for u in t.turns
            ),
        )
        for t in trajectories
    )


@dataclass(slots=True)
class Dataset:
    """A named, versioned set of trajectories; identified by ``digest()``."""

    name: str
    version: str
    trajectories: tuple[Trajectory, ...]
    metadata: dict[str, Any] = field(default_factory=dict)

    def header(self) -> dict[str, Any]:
        """The header line's content, without the digest."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "version": self.version,
            "metadata": self.metadata,
            "trajectories": len(self.trajectories),
        }

    def canonical_lines(self) -> Iterator[str]:
        """The canonical encoding, line by line (each without its trailing newline)."""
        yield canonical_json(self.header())
        for trajectory in self.trajectories:
            yield canonical_json(trajectory.to_dict())

    def digest(self) -> str:
        """sha256 hex of the canonical encoding."""
        h = hashlib.sha256()
        for line in self.canonical_lines():
            h.update(line.encode("utf-8"))
            h.update(b"\n")
        return h.hexdigest()

    def max_prompt_tokens(self) -> int | None:
        """Largest known prompt (local counts, else recorded counts); None if none known."""
        best: int | None = None
        for trajectory in self.trajectories:
            for size in trajectory.prompt_tokens():
                if size is not None and (best is None or size > best):
                    best = size
        return best

    def validate(self) -> None:
        seen: set[str] = set()
        for trajectory in self.trajectories:
            trajectory.validate()
            if trajectory.id in seen:
                raise DatasetError(f"duplicate trajectory id {trajectory.id!r}")
            seen.add(trajectory.id)

    def turn_count(self) -> int:
        return sum(len(t.turns) for t in self.trajectories)


class BytesWriter(Protocol):
    """Where ``write_dataset`` writes: a binary file, a GzipFile, a BytesIO."""

    def write(self, data: bytes, /) -> int: ...


def write_dataset(stream: BytesWriter, dataset: Dataset) -> str:
    """Write the uncompressed file body to ``stream``; return the digest."""
    lines = [line.encode("utf-8") for line in dataset.canonical_lines()]
    h = hashlib.sha256()
    for line in lines:
        h.update(line)
        h.update(b"\n")
    digest = h.hexdigest()
    header = dataset.header()
    header["digest"] = digest
    stream.write(canonical_json(header).encode("utf-8") + b"\n")
    for line in lines[1:]:
        stream.write(line + b"\n")
    return digest


def dataset_to_bytes(dataset: Dataset, *, compresslevel: int = 6) -> bytes:
    """The gzip JSONL file content (deterministic: gzip mtime is 0)."""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=compresslevel, mtime=0) as gz:
        write_dataset(gz, dataset)
    return raw.getvalue()


def save_dataset(path: str | os.PathLike[str], dataset: Dataset) -> str:
    """Validate and write ``dataset`` as gzip JSONL; return its digest."""
    dataset.validate()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, dataset_to_bytes(dataset))
    return dataset.digest()


def dataset_from_bytes(data: bytes, *, verify: bool = True) -> Dataset:
    """Parse a dataset file's content (gzip or plain JSONL)."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise DatasetError("empty dataset file")
    try:
        header = json.loads(lines[0])
    except ValueError as exc:
        raise DatasetError(f"bad header line: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise DatasetError("not an agentperf dataset (header 'format' missing or wrong)")
    if header.get("format_version") != FORMAT_VERSION:
        raise DatasetError(f"unsupported format_version {header.get('format_version')!r}")
    trajectories: list[Trajectory] = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            trajectories.append(Trajectory.from_dict(json.loads(line)))
        except ValueError as exc:
            raise DatasetError(f"line {n}: {exc}") from exc
    if header.get("trajectories") not in (None, len(trajectories)):
        raise DatasetError(
            f"header says {header['trajectories']} trajectories, file has {len(trajectories)}"
        )
    dataset = Dataset(
        name=str(header.get("name", "")),
        version=str(header.get("version", "")),
        trajectories=tuple(trajectories),
        metadata=dict(header.get("metadata") or {}),
    )
    expected = header.get("digest")
    if verify and expected is not None:
        # Fast path: a file we wrote is already canonical, so hash its bytes as read.
        h = hashlib.sha256()
        h.update(canonical_json({k: v for k, v in header.items() if k != "digest"}).encode())
        h.update(b"\n")
        for line in lines[1:]:
            h.update(line)
            h.update(b"\n")
        if h.hexdigest() != expected and dataset.digest() != expected:
            raise DatasetError(f"digest mismatch: header says {expected}")
    return dataset


def load_dataset(path: str | os.PathLike[str], *, verify: bool = True) -> Dataset:
    """Read a gzip JSONL dataset; checks the digest when the header carries one."""
    return dataset_from_bytes(Path(path).read_bytes(), verify=verify)
