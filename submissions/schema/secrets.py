"""Moved to `agentperf.schema.secrets` (DB-free); kept so older imports still work."""

from agentperf.schema.secrets import *  # noqa: F403
