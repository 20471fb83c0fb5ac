"""What the submissions layer tells the layers above it (docs/architecture.md "Layers").

Submissions sit below runs, so they cannot call dispatch or touch a run; they send these
signals and `runs` connects its receivers (`runs/receivers.py`, wired in `RunsConfig.ready`).
"""

from __future__ import annotations

from django.dispatch import Signal

# Sent once the rows of a newly validated submission are committed: `submission_id`.
submission_validated = Signal()

# Sent inside the withdrawal's transaction: `submission`, `label` (who withdrew it).
submission_withdrawn = Signal()

# Sent inside every state change's transaction, once its conditional update won:
# `submission`, `from_state`, `to_state` (submissions.services.lifecycle). A receiver that
# acts on it queues its work on commit.
submission_transitioned = Signal()
