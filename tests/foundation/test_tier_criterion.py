"""A tier set's criterion (docs/catalog.md "SLO tier sets", docs/engine.md "Session SLOs"):
read from tiers.yaml, stored on the set, copied into every tier of the run spec."""

from __future__ import annotations

import shutil

import pytest

from agentperf import contract
from agentperf.catalog_data import DEFAULT_CATALOG_DIR, CatalogError, load_catalog
from catalog.models import SloTierSet
from catalog.services import catalog_seed

pytestmark = pytest.mark.django_db

SESSIONS_SET = """tier_sets:
  - slug: by-sessions
    model: null
    name: By sessions
    effective_date: "2026-11-02"
    source: test
    criterion: sessions
    min_session_share: 0.9
    tiers:
      - {name: fast, min_p25_output_speed: 60, max_ttft_s: 5}
"""


def _catalog(tmp_path, tiers: str):
    for name in ("models.yaml", "hardware.yaml", "prices.yaml"):
        shutil.copy(DEFAULT_CATALOG_DIR / name, tmp_path / name)
    (tmp_path / "tiers.yaml").write_text(tiers)
    return tmp_path


def test_the_criterion_travels_from_the_catalog_into_the_run_spec_tiers(tmp_path) -> None:
    catalog_seed(directory=_catalog(tmp_path, SESSIONS_SET))
    tier_set = SloTierSet.objects.get(slug="by-sessions")
    assert (tier_set.criterion, tier_set.min_session_share) == ("sessions", 0.9)
    tiers = [contract.Tier.model_validate(t) for t in tier_set.as_engine_tiers()]
    assert [(t.criterion, t.min_session_share) for t in tiers] == [("sessions", 0.9)]
    assert tiers[0].engine().criterion == "sessions"
    # the shipped default set keeps the request-level rule
    catalog_seed()
    default = SloTierSet.objects.get(slug="agentperf-default-v1")
    assert {t["criterion"] for t in default.as_engine_tiers()} == {"requests"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("criterion: agents", "by-sessions.criterion: expected requests or sessions"),
        ("min_session_share: 1.5", "by-sessions.min_session_share: expected a number in"),
    ],
)
def test_a_bad_criterion_is_refused_naming_the_field(tmp_path, line, message) -> None:
    key = line.split(":")[0]
    text = "\n".join(
        f"    {line}" if row.strip().startswith(key + ":") else row
        for row in SESSIONS_SET.splitlines()
    )
    with pytest.raises(CatalogError, match=message):
        load_catalog(_catalog(tmp_path, text))
