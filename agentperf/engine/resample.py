"""The session bootstrap's draws (docs/engine.md "Bootstrap arithmetic"): one seeded
generator per statistic and each resample's count per group, drawn in batches. The lowest
of the engine's statistics modules: ``metrics`` (session shares) and ``stats`` (intervals)
both draw through it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any


def bootstrap_rng(seed: int, name: str) -> Any:
    """The seeded generator of one statistic's resamples (a numpy Generator: drawing each
    resample's groups in one call instead of one Python call per group)."""
    import numpy as np

    digest = hashlib.sha256(f"agentperf-bootstrap:{seed}:{name}".encode()).digest()
    return np.random.default_rng(list(digest))


def batched_counts(rng: Any, k: int, resamples: int) -> Iterator[Any]:
    """Each resample's count per group, ``resamples`` rows at a time: the draws of
    ``rng.integers(0, k, size=k)`` once per resample (one call of shape (rows, k) draws
    the same numbers and leaves the generator in the same state) and their ``bincount``."""
    import numpy as np

    rows = max(1, min(resamples, (1 << 21) // max(1, k)))
    done = 0
    while done < resamples:
        r = min(rows, resamples - done)
        draws = rng.integers(0, k, size=(r, k))
        draws += (np.arange(r, dtype=draws.dtype) * k)[:, None]
        yield np.bincount(draws.ravel(), minlength=r * k).reshape(r, k)
        done += r
