"""What every number of a profile rests on (docs/simulator.md "Profiles and the source of
every number"): each entry of a profile's ``sources`` is one of

- **sourced**: a publication, a vendor page, a catalog figure (a URL or a named document);
- **derived**: computed from sourced figures, or physics ("derived: …", "physics: …");
- **fitted**: set by a fit to published or measured figures ("fitted by …");
- **open**: a parameter the twin reports a band over (its ``open`` section), so the
  figure's uncertainty is shown rather than hidden ("open (band …)", or any entry whose
  path an open parameter covers);
- **assumption**: a stated guess ("assumption: …", a "change from …" another profile, a
  derivation that itself rests on an assumption) that no band covers.

An *unbanded assumption* is the debt the issue tracks: ``python -m agentperf.simulator show``
prints the counts and lists them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from agentperf.simulator.profile_types import OpenParameter, Profile

SOURCED: Final = "sourced"
DERIVED: Final = "derived"
FITTED: Final = "fitted"
OPEN: Final = "open"
ASSUMPTION: Final = "assumption"
KINDS = (SOURCED, DERIVED, FITTED, OPEN, ASSUMPTION)


def _leaves(patch: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for key, value in patch.items():
        path = f"{prefix}.{key}"
        out += _leaves(value, path) if isinstance(value, dict) else [path]
    return out


def _covered_paths(params: tuple[OpenParameter, ...]) -> list[str]:
    """The dotted paths the band moves: each range parameter's path, each choice's leaves."""
    out: list[str] = []
    for p in params:
        if p.choices:
            for _, patch in p.choices:
                out += _leaves(patch, "deployment")
        else:
            out.append(p.path)
    return out


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def source_kind(path: str, text: str, covered: list[str]) -> str:
    """The kind of one ``sources`` entry (module docstring)."""
    t = text.strip().lower()
    if t.startswith("open") or any(_overlaps(path, c) for c in covered):
        return OPEN
    if t.startswith("fitted"):
        return FITTED
    if t.startswith(("assumption", "change from")) or t.startswith("derived (assumption"):
        return ASSUMPTION
    if t.startswith(("derived", "physics")):
        return DERIVED
    return SOURCED


def kinds(profile: Profile) -> dict[str, str]:
    """{source path: kind} for every entry of the profile's sources."""
    covered = _covered_paths(profile.open_parameters)
    return {path: source_kind(path, text, covered) for path, text in profile.provenance.items()}


def counts(profile: Profile) -> dict[str, int]:
    """How many of the profile's numbers rest on each kind, every kind listed."""
    found = Counter(kinds(profile).values())
    return {kind: found.get(kind, 0) for kind in KINDS}


def unbanded_assumptions(profile: Profile) -> list[str]:
    """The source paths that are assumptions no band covers, in the profile's order."""
    return [path for path, kind in kinds(profile).items() if kind == ASSUMPTION]
