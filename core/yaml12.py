"""Moved to `agentperf.schema.yaml12` (DB-free, shared with the CLI); kept for the web side's
imports."""

from agentperf.schema.yaml12 import *  # noqa: F403
