"""tests/services.py `_free_base_port(count)`: every one of the `count` ports is checked by
bind, so a range whose last port is held (e.g. a rack cluster's 20th slurmd) is passed over."""

from __future__ import annotations

import random
import socket

from tests import services

COUNT = 22


def _free_range(start: int) -> int:
    """A base from `start` up whose COUNT ports (and +10000) bind now."""
    for base in range(start, 29000, 100):
        ports = [base + i for i in range(COUNT)] + [base + 10000 + i for i in range(COUNT)]
        if all(services._bindable(p) for p in ports):
            return base
    raise AssertionError("no free port range to test with")


def test_a_range_with_any_port_held_is_passed_over(monkeypatch):
    first = _free_range(23000)
    second = _free_range(first + 1000)
    held = socket.socket()
    held.bind(("127.0.0.1", first + COUNT - 1))  # bound, not listening: connect() misses it
    picks = iter([first, second])

    class Picks(random.Random):
        def randrange(self, *args, **kwargs):
            return next(picks)

    monkeypatch.setattr(services.random, "Random", Picks)
    try:
        assert services._free_base_port(count=COUNT) == second
    finally:
        held.close()
