"""Write the deployment-config JSON Schema: `python -m agentperf.schema [PATH]` (this old
name still works)."""

import sys

from agentperf.schema.__main__ import DEFAULT_PATH, main, render  # noqa: F401

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
