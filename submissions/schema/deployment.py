"""Moved to `agentperf.schema.deployment` (DB-free); kept so older imports still work. The
size-limited readers are `submissions.schema`'s, which apply the MAX_CONFIG_BYTES setting."""

from agentperf.schema.deployment import *  # noqa: F403
from submissions.schema import load_document, parse_config  # noqa: F401
