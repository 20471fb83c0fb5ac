"""Write the deployment-config JSON Schema: `python -m agentperf.schema [PATH]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentperf.schema.deployment import config_json_schema

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "deployment-config.schema.json"


def render() -> str:
    return json.dumps(config_json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT_PATH
    path.write_text(render())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
