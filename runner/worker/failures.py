"""How a run attempt stops short of its completion (docs/pipeline.md "The director seam"):
a failure that retrying will not fix, or a cancel from the web side. The director reports
either through its reporter and never raises it out of `run()`."""

from __future__ import annotations


class RunCancelled(Exception):
    """The web side said stop (the submission was withdrawn or the run cancelled)."""


class RunFailure(Exception):
    """A failure that retrying will not fix (bad config, failed qualification, bad data)."""
