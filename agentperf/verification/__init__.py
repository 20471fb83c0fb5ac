"""The checks over a run's records (`checks`, with `quality`, `speculative`, `taskcheck`,
`fingerprint`) and their one status (`status`); the pool host's probes and sandboxed task
execution are runner/verification/, and the web adds its own checks
(runs/verification_report.py). docs/verification.md lists every check."""
