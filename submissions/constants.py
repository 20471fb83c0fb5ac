"""Submission lifecycle (docs/pipeline.md "Submission lifecycle"). Every transition goes through
`submissions.services.lifecycle.submission_transition`."""

DRAFT = "draft"
SUBMITTED = "submitted"
VALIDATED = "validated"
# A process launch on a platform-operated pool waits here for a reviewer to approve that
# exact launch (docs/security.md "Vendor commands").
AWAITING_APPROVAL = "awaiting_approval"
INVALID = "invalid"
QUEUED = "queued"
RUNNING = "running"
VERIFYING = "verifying"
FAILED = "failed"
IN_REVIEW = "in_review"
PUBLISHED = "published"
REJECTED = "rejected"
CHANGES_REQUESTED = "changes_requested"
WITHDRAWN = "withdrawn"
SUPERSEDED = "superseded"
INVALIDATED = "invalidated"

STATUS_CHOICES = [
    (DRAFT, "Draft"),
    (SUBMITTED, "Submitted"),
    (VALIDATED, "Validated"),
    (AWAITING_APPROVAL, "Awaiting launch approval"),
    (INVALID, "Invalid"),
    (QUEUED, "Queued"),
    (RUNNING, "Running"),
    (VERIFYING, "Verifying"),
    (FAILED, "Failed"),
    (IN_REVIEW, "In review"),
    (PUBLISHED, "Published"),
    (REJECTED, "Rejected"),
    (CHANGES_REQUESTED, "Changes requested"),
    (WITHDRAWN, "Withdrawn"),
    (SUPERSEDED, "Superseded"),
    (INVALIDATED, "Invalidated"),
]
ALL_STATES = tuple(value for value, _ in STATUS_CHOICES)

# No transition leaves these (a resubmission is a new Submission linked to the old one).
FINAL_STATES = (INVALID, REJECTED, CHANGES_REQUESTED, WITHDRAWN, SUPERSEDED, INVALIDATED)
PRE_PUBLISH_STATES = (
    DRAFT,
    SUBMITTED,
    VALIDATED,
    AWAITING_APPROVAL,
    QUEUED,
    RUNNING,
    VERIFYING,
    FAILED,
    IN_REVIEW,
)
ACTIVE_RUN_STATES = (QUEUED, RUNNING, VERIFYING)

ALLOWED_TRANSITIONS: dict[str, tuple[str, ...]] = {
    DRAFT: (SUBMITTED, WITHDRAWN),
    SUBMITTED: (VALIDATED, INVALID, WITHDRAWN),
    VALIDATED: (QUEUED, AWAITING_APPROVAL, WITHDRAWN),
    AWAITING_APPROVAL: (QUEUED, REJECTED, WITHDRAWN),
    QUEUED: (RUNNING, FAILED, WITHDRAWN),
    # running -> queued: the worker died and the run is retried from its stored trials.
    RUNNING: (VERIFYING, FAILED, QUEUED, WITHDRAWN),
    VERIFYING: (IN_REVIEW, FAILED, WITHDRAWN),
    FAILED: (QUEUED, AWAITING_APPROVAL, WITHDRAWN),  # re-run
    IN_REVIEW: (PUBLISHED, REJECTED, CHANGES_REQUESTED, QUEUED, AWAITING_APPROVAL, WITHDRAWN),
    PUBLISHED: (SUPERSEDED, INVALIDATED),
}
for _state in FINAL_STATES:
    ALLOWED_TRANSITIONS.setdefault(_state, ())

# Transitions that must carry a human-readable reason.
REASON_REQUIRED = {
    (IN_REVIEW, REJECTED),
    (AWAITING_APPROVAL, REJECTED),
    (IN_REVIEW, CHANGES_REQUESTED),
    (PUBLISHED, SUPERSEDED),
    (PUBLISHED, INVALIDATED),
    (QUEUED, FAILED),
    (RUNNING, FAILED),
    (VERIFYING, FAILED),
    (SUBMITTED, INVALID),
}

SOURCE_VENDOR = "vendor_submitted"
SOURCE_OPERATOR = "operator_built"
SOURCE_CHOICES = [(SOURCE_VENDOR, "Vendor-submitted"), (SOURCE_OPERATOR, "Operator-built")]
