"""The typed documents the run contract carries (docs/pipeline.md "The contract"), by what
they describe: ``rules`` (the contract's base model and number types), ``trial`` (a
trial's metrics, statistics and telemetry), ``shards`` (a sharded trial's shard reports
and load-generator section), ``search`` (a run's search summary) and ``endpoint`` (what
the launcher says about the served endpoint).

Everyone imports them from ``agentperf.contract``, the one import place of the contract.
DB-free and web-free: pydantic and the engine, never Django."""
