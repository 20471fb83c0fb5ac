"""Verification on the pool host: qualification probes before load (`probes`), the checks
over a run's records (`checks`, with `quality`, `speculative`, `taskcheck`, `fingerprint`)
and their one status (`status`); the web adds its own checks (runs/verification.py).
docs/verification.md lists every check."""
