"""`python -m agentperf_cli ...`, the same as the `agentperf` console script."""

from agentperf_cli.main import main

raise SystemExit(main())
