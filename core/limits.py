"""Moved to `agentperf.schema.limits` (DB-free, shared with the CLI); kept for the web side's
imports."""

from agentperf.schema.limits import *  # noqa: F403
from agentperf.schema.limits import LimitError, load_json  # noqa: F401
