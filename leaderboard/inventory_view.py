"""The inventory of what served a result, as the public reads it (docs/verification.md
"inventory").

The runner posts it through the contract (``CompletionReport.telemetry.inventory``,
agentperf/inventory.py ``Inventory``) and it stays on the run (``BenchmarkRun.telemetry``),
hashed into the result's receipt; no copy is kept on the result. ``public_inventory`` gives
it to the result page and the public API with the verification check that compared it with
the config.
"""

from __future__ import annotations

from typing import Any

from agentperf.inventory import NAME, Inventory
from leaderboard.models import Result


def public_inventory(result: Result) -> dict[str, Any] | None:
    """``{"recorded": bool, "reason"?, "document"?, "check"?}``; None for a simulated result
    (no hardware served it)."""
    if result.is_simulated:
        return None
    run = result.run
    recorded = run.inventory
    report = getattr(run, "verification", None)
    check = report.result(NAME) if report is not None else None
    out: dict[str, Any] = {"recorded": recorded is not None}
    if recorded is None:
        out["reason"] = "the runner recorded no inventory of what served this run"
    elif isinstance(recorded, Inventory):
        out["document"] = recorded.model_dump(mode="json")
    else:  # stored by an older runner under another shape: as stored
        out["document"] = recorded
    if check is not None:
        out["check"] = {
            "status": check.status,
            "summary": check.summary,
            "mismatches": check.inventory().mismatches,
        }
    return out


def launched_from(document: dict[str, Any]) -> str:
    """One line: what ran (an image by digest, or a host process with no image)."""
    runtime = document.get("runtime") or {}
    digest = runtime.get("image_digest")
    if digest:
        return f"image {runtime.get('image_reference') or ''} ({digest})".replace("  (", " (")
    if runtime.get("launcher") == "process":
        return "host process, image not run"
    return str(runtime.get("launcher") or "unknown launcher")
