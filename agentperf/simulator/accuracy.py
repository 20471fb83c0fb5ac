"""How far each twin profile is from figures it never saw (docs/simulator.md "Accuracy").

A profile is judged only on **held-out figures**: published figures its fit never used, or
points measured on this machine's real engines that its fit never used. Three records feed
them, each committed beside the profile and each rebuilt by its own command:

- ``<profile>.holdout.json`` — the profile's predictions at a published points file it was
  never fitted to (``python -m agentperf.simulator holdout --profile P --points F --write``),
  or, for the CPU twins, their held-out configurations against the real server
  (``python -m benchmarks.twin_holdout ... --record``);
- ``<profile>.fit.json`` — a fitted profile's leave-one-point-out errors
  (``calibrate --fit``): each point predicted by the fit made without it, the only hold-out
  a profile fitted to every published point has.

A profile is **admitted** when it has held-out figures and every one is within ±25 %
(:data:`TOLERANCE`); otherwise **quarantined**, with the reason. A figure the twin never
reaches (a speed its curve does not come down to) is a miss. No figure at all is not a
pass: a profile nobody checked is quarantined too.

Pure and file-based: the web tier stores :meth:`ProfileAccuracy.dump` per profile
(``manage.py twin_accuracy``) and labels simulated results by it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from agentperf.simulator.profile import PROFILES_DIR, available_profiles, repo_relative

TOLERANCE = 0.25
HOLDOUT_SUFFIX = ".holdout.json"
FIT_SUFFIX = ".fit.json"

ADMITTED: Final = "admitted"
QUARANTINED: Final = "quarantined"
Status = Literal["admitted", "quarantined"]

# where a held-out figure comes from
PUBLISHED: Final = "published"
MEASURED: Final = "measured on this CPU"
LEAVE_ONE_OUT: Final = "leave-one-out"
Basis = Literal["published", "measured on this CPU", "leave-one-out"]


class HeldOutFigure(BaseModel):
    """One figure the profile did not see, and what the twin says for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    figure: str  # "1 agent", "at 220 tok/s per agent", "q4_0/p2/t1, 4 agents: p25 speed"
    unit: str  # "tok/s per agent", "tok/s per accelerator", "tok/s"
    reference: float  # the published or measured figure
    simulated: float | None  # None: the twin never reaches it
    basis: Basis
    read: str = ""  # how the simulated figure was read ("between trials", "at a trial", …)

    @property
    def error(self) -> float | None:
        """simulated ÷ reference − 1; None when the twin never reaches the figure."""
        if self.simulated is None or not self.reference:
            return None
        return self.simulated / self.reference - 1.0

    @property
    def within(self) -> bool:
        err = self.error
        return err is not None and abs(err) <= TOLERANCE


class ProfileAccuracy(BaseModel):
    """A profile's held-out figures, their MAPE and its status."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str
    figures: tuple[HeldOutFigure, ...]
    sources: tuple[str, ...]  # the records read, repository-relative, with their commands

    @property
    def reached(self) -> list[HeldOutFigure]:
        return [f for f in self.figures if f.error is not None]

    @property
    def mape(self) -> float | None:
        """Mean absolute relative error over the figures the twin reaches; None when none."""
        errs = [abs(f.error) for f in self.figures if f.error is not None]
        return sum(errs) / len(errs) if errs else None

    @property
    def within_count(self) -> int:
        return sum(f.within for f in self.figures)

    @property
    def status(self) -> Status:
        if self.figures and self.within_count == len(self.figures):
            return ADMITTED
        return QUARANTINED

    @property
    def reason(self) -> str:
        n = len(self.figures)
        if not n:
            return "no held-out figure: nothing published or measured that its fit did not use"
        missed = n - self.within_count
        unreached = n - len(self.reached)
        if not missed:
            return f"all {n} held-out figures within ±{TOLERANCE:.0%}"
        text = f"{missed} of {n} held-out figures outside ±{TOLERANCE:.0%}"
        if unreached:
            text += f" ({unreached} never reached)"
        return text

    def dump(self) -> dict[str, Any]:
        """What the web tier stores and serves: the figures with their errors, the MAPE,
        the counts and the status with its reason."""
        return {
            "profile": self.profile,
            "status": self.status,
            "reason": self.reason,
            "mape": None if self.mape is None else round(self.mape, 4),
            "figures_total": len(self.figures),
            "figures_within": self.within_count,
            "tolerance": TOLERANCE,
            "sources": list(self.sources),
            "figures": [
                {
                    **f.model_dump(),
                    "error": None if f.error is None else round(f.error, 4),
                    "within": f.within,
                }
                for f in self.figures
            ],
        }


def holdout_path(profile: str) -> Path:
    return PROFILES_DIR / f"{profile}{HOLDOUT_SUFFIX}"


def holdout_figures(record: dict[str, Any]) -> list[HeldOutFigure]:
    """The figures of a ``.holdout.json`` record (validated: a malformed record raises)."""
    return [HeldOutFigure.model_validate(f) for f in record.get("figures") or []]


def leave_one_out_figures(record: dict[str, Any]) -> list[HeldOutFigure]:
    """A fit record's points, each as the fit made without it predicts it (linearised;
    docs/simulator.md "Calibration: the fit"). A point whose leave-one-out error the
    record could not compute (it alone fixes a parameter) is a figure never reached."""
    out = []
    for p in record.get("points") or []:
        loo = p.get("loo_error_pct")
        published = float(p["published"])
        simulated = None if loo is None else round(published * (1.0 + float(loo) / 100.0), 1)
        out.append(
            HeldOutFigure(
                figure=_point_label(str(p["point"])),
                unit=_point_unit(str(p["point"])),
                reference=published,
                simulated=simulated,
                basis=LEAVE_ONE_OUT,
                read="the fit without this point (linearised)",
            )
        )
    return out


def _point_label(point: str) -> str:
    if point == "single_agent":
        return "1 agent"
    if point == "two_agents":
        return "2 agents"
    if point.startswith("frontier@"):
        return f"at {point.split('@', 1)[1]} tok/s per agent"
    return point


def _point_unit(point: str) -> str:
    return "tok/s per accelerator" if point.startswith("frontier@") else "tok/s per agent"


def profile_accuracy(profile: str, *, profiles_dir: Path = PROFILES_DIR) -> ProfileAccuracy:
    """Every held-out figure the committed records hold for ``profile``."""
    figures: list[HeldOutFigure] = []
    sources: list[str] = []
    holdout = profiles_dir / f"{profile}{HOLDOUT_SUFFIX}"
    if holdout.is_file():
        record = json.loads(holdout.read_text())
        figures += holdout_figures(record)
        sources.append(f"{repo_relative(holdout)} ({record.get('command', 'no command recorded')})")
    fit = profiles_dir / f"{profile}{FIT_SUFFIX}"
    if fit.is_file():
        figures += leave_one_out_figures(json.loads(fit.read_text()))
        sources.append(f"{repo_relative(fit)} (leave-one-out of calibrate --fit)")
    return ProfileAccuracy(profile=profile, figures=tuple(figures), sources=tuple(sources))


def accuracy_table() -> list[ProfileAccuracy]:
    """Every bundled profile, in name order."""
    return [profile_accuracy(name) for name in available_profiles()]
