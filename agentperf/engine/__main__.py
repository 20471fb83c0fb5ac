"""``python -m agentperf.engine``: see agentperf/engine/cli.py and docs/engine.md."""

from agentperf.engine.cli import main

raise SystemExit(main())
