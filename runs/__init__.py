"""The web side of runs: run, trial and verification-report models, dispatch, the runner API's server views, ingest and the reaper (docs/architecture.md)."""
