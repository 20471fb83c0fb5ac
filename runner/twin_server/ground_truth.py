"""What the twin's real-time server really did, per request (``GroundTruth``), kept for the
last ``GROUND_TRUTH_REQUESTS`` requests (``GroundTruthLog``) and served at
``/debug/ground_truth`` when enabled: every write that carried output, as
``(perf_counter_ns just before the write, tokens in it, model emission time)``. The
monotonic clock is shared by every process on the machine, so a client's timestamps can be
compared with it directly (docs/simulator.md "Entry points").
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

GROUND_TRUTH_REQUESTS = 200_000


@dataclass(slots=True)
class GroundTruth:
    """What the server really did for one request (perf_counter_ns clock)."""

    request_id: str
    client_id: str | None
    t_received_ns: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    emissions: list[tuple[int, int, int]] = field(default_factory=list)  # (t_write, n, t_model)

    @property
    def t_first_ns(self) -> int | None:
        return self.emissions[0][0] if self.emissions else None

    @property
    def t_last_ns(self) -> int | None:
        return self.emissions[-1][0] if self.emissions else None

    @property
    def output_speed(self) -> float | None:
        """(n_out − 1) / (t_last − t_first), as docs/engine.md "Definitions" defines it, on the
        true writes."""
        if len(self.emissions) < 2:
            return None
        n = sum(e[1] for e in self.emissions)
        dt = self.emissions[-1][0] - self.emissions[0][0]
        return (n - 1) / (dt / 1e9) if dt > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "client_id": self.client_id,
            "t_received_ns": self.t_received_ns,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "emissions": [list(e) for e in self.emissions],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroundTruth:
        """A ground truth as ``to_dict`` wrote it (the debug endpoint's JSON)."""
        return cls(
            request_id=d["request_id"],
            client_id=d["client_id"],
            t_received_ns=d["t_received_ns"],
            prompt_tokens=d["prompt_tokens"],
            cached_tokens=d["cached_tokens"],
            completion_tokens=d["completion_tokens"],
            emissions=[(int(t), int(n), int(m)) for t, n, m in d["emissions"]],
        )


class GroundTruthLog:
    """The last ``limit`` requests' ground truths, by server id and by client id (the
    ``X-Request-Id`` header or the body's ``user``)."""

    def __init__(self, limit: int = GROUND_TRUTH_REQUESTS) -> None:
        self._limit = limit
        self._truth: OrderedDict[str, GroundTruth] = OrderedDict()
        self._by_client: dict[str, str] = {}

    def get(
        self, request_id: str | None = None, *, client_id: str | None = None
    ) -> GroundTruth | None:
        """The true emissions of one request, by server id or by client id."""
        if request_id is None and client_id is not None:
            request_id = self._by_client.get(client_id)
        return self._truth.get(request_id) if request_id is not None else None

    def record(self, truth: GroundTruth) -> None:
        self._truth[truth.request_id] = truth
        if truth.client_id:
            self._by_client[truth.client_id] = truth.request_id
        while len(self._truth) > self._limit:
            _, old = self._truth.popitem(last=False)
            if old.client_id:
                self._by_client.pop(old.client_id, None)
