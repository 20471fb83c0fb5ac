"""AgentPerf's domain package: what the web side, the pool host and the public all read, with
no Django and no database (docs/architecture.md "Packages"). The run contract (`contract`),
the deployment-config schema (`schema`), the load engine (`engine`), the simulated serving
system's model (`simulator`), the ladder's maths (`ladder`), the checks over a run's records
(`verification`), the receipt (`receipt`) and the catalog's bundled entries (`catalog`).
It ships as the `agentperf-engine` distribution (packages/agentperf)."""
