"""The quality floor on the public pages: the result page's Quality row and the results
tables' Quality column, from the verification report's quality_distribution check."""

from __future__ import annotations

import math

import pytest

from agentperf.verification.checks import check_quality_distribution
from demo.synthetic import make_model, make_published_result

pytestmark = pytest.mark.django_db


def _check(*, drift: float, precision: str = "gguf_q8_0") -> dict:
    """A quality_distribution check computed by the real code from synthetic top-k lists."""
    ref_pos = [["a", math.log(0.9)], ["b", math.log(0.05)]]
    cand_pos = [["a", math.log(0.9 - drift)], ["b", math.log(0.05 + drift)]]
    reference = {
        "source": "test",
        "deployment": "F32 reference",
        "distributions": {
            "texts": [{"id": "code", "tokens": [1] * 21, "positions": [ref_pos] * 20}]
        },
    }
    probe = {
        "name": "next_token_distributions",
        "status": "pass",
        "evidence": {"texts": [{"id": "code", "positions": [cand_pos] * 20, "error": ""}]},
    }
    return check_quality_distribution([probe], reference, model="m", weight_precision=precision)


def test_a_result_page_shows_its_quality_figures_and_the_model_table_its_column(client):
    check = _check(drift=0.01)
    assert check["status"] == "pass"
    model = make_model()
    result = make_published_result(model=model, verification=[check])
    assert result.quality["status"] == "pass" and result.quality["class"] == "8bit"
    html = client.get(f"/results/{result.pk}/").content.decode()
    assert 'id="quality"' in html and "mean KL" in html and "8bit precision limits" in html
    table = client.get(f"/models/{model.slug}/").content.decode()
    assert f"pass: KL {result.quality['mean_kl']:.4f}" in table


def test_a_result_without_a_reference_says_so_and_a_simulated_one_has_no_figure(client):
    no_ref = check_quality_distribution([], None, model="m", weight_precision="bf16")
    plain = make_published_result(verification=[no_ref])
    assert plain.quality["status"] == "no_reference"
    assert "quality: no reference" in client.get(f"/results/{plain.pk}/").content.decode()
    twin = make_published_result(simulated=True)
    assert "simulated: not applicable" in client.get(f"/results/{twin.pk}/").content.decode()
