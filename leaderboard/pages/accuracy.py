"""The twin's accuracy page (`/twin/accuracy/`): every twin profile against every figure it
never saw, with each figure's error, each profile's MAPE and its status (admitted or
quarantined). Built from the stored TwinAccuracy rows (``manage.py twin_accuracy``;
docs/simulator.md "Accuracy")."""

from __future__ import annotations

from django.db.models import Count

from agentperf.simulator.accuracy import TOLERANCE
from leaderboard.models import Result, TwinAccuracy
from leaderboard.tables import Column, Table


def _figures_table(row: TwinAccuracy) -> Table:
    record = row.record
    return Table(
        f"twin-{row.profile}",
        f"{row.profile}: held-out figures",
        [
            Column("figure", "Figure"),
            Column("basis", "Held out as"),
            Column("reference", "Published or measured", "float1"),
            Column("simulated", "Twin", "float1", "never reached"),
            Column("unit", "Unit"),
            Column("error", "Error", "pct", "—"),
            Column("within", f"Within ±{record['tolerance']:.0%}", "bool"),
            Column("read", "How the twin's figure was read"),
        ],
        [{**f, "_class": "" if f["within"] else "miss"} for f in record["figures"]],
        caption="; ".join(record["sources"]) or "No record holds a held-out figure for it.",
    )


def accuracy_page() -> dict:
    rows = list(TwinAccuracy.objects.all())
    counts = dict(
        Result.objects.filter(status=Result.STATUS_PUBLISHED, is_simulated=True)
        .values_list("twin_profile")
        .annotate(n=Count("pk"))
    )
    tables = {f"twin-{row.profile}": _figures_table(row) for row in rows}
    profiles = [
        {
            "profile": row.profile,
            "status": row.status,
            "reason": row.record["reason"],
            "mape": row.mape,
            "mape_text": "" if row.mape is None else f"{row.mape:.1%}",
            "within": row.record["figures_within"],
            "total": row.record["figures_total"],
            "results": counts.get(row.profile, 0),
            "table": tables[f"twin-{row.profile}"],
        }
        for row in rows
    ]
    summary = Table(
        "twin-accuracy",
        "Every twin profile",
        [
            Column("profile", "Profile"),
            Column("status", "Status"),
            Column("mape", "MAPE", "pct", "—"),
            Column("within", f"Figures within ±{TOLERANCE:.0%}", "text"),
            Column("results", "Published simulated results", "int"),
            Column("reason", "Why"),
        ],
        [
            {
                "profile": p["profile"],
                "status": p["status"],
                "mape": p["mape"],
                "within": f"{p['within']} of {p['total']}",
                "results": p["results"],
                "reason": p["reason"],
                "_links": {"profile": f"#twin-{p['profile']}"},
                "_class": "miss" if p["status"] == TwinAccuracy.STATUS_QUARANTINED else "",
            }
            for p in profiles
        ],
    )
    tables["twin-accuracy"] = summary
    return {
        "profiles": profiles,
        "summary": summary,
        "admitted": sum(p["status"] == TwinAccuracy.STATUS_ADMITTED for p in profiles),
        "built_at": max((row.built_at for row in rows), default=None),
        "tables": tables,
    }
