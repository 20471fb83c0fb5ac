"""``python -m runner.engine``: see runner/engine/cli.py and docs/engine.md."""

from runner.engine.cli import main

raise SystemExit(main())
