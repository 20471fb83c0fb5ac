"""A result page's "Failed requests" table: per trial with failures, the top error reasons
its summary kept with their counts and one detail as the server gave it (docs/engine.md
"Error reasons"); a trial stored before reasons were summarised shows its counts per class."""

from __future__ import annotations

import html
import re

import pytest

from demo.synthetic import make_published_result

VLLM_TOO_LONG = (
    "HTTP 400: This model's maximum context length is 16384 tokens. However, your prompt "
    "contains at least 16385 input tokens, which exceeds this limit even without any output "
    "tokens. Please reduce the length of the input prompt. (parameter=input_tokens, "
    "value=16385)"
)


def _with_failures(result, **metrics):
    """The result's highest trial, its stored metrics changed by ``metrics``."""
    trial = result.run.trials.order_by("index").last()
    trial.metrics = {**trial.metrics, **metrics}
    trial.save(update_fields=["metrics"])
    return trial


def _table(page: str) -> str:
    start = page.index('id="t-failed_requests"')
    return page[start : page.index("</table>", start)]


@pytest.mark.django_db
def test_the_result_page_lists_each_failing_trials_reasons_with_counts(client):
    result = make_published_result(accelerators=2)
    trial = _with_failures(
        result,
        failed=13,
        errors_by_class={"http_status": 12, "timeout": 1},
        error_reasons=[
            {
                "error_class": "http_status",
                "reason": VLLM_TOO_LONG.replace("16384", "N").replace("16385", "N"),
                "count": 11,
                "example": VLLM_TOO_LONG,
            },
            {
                "error_class": "http_status",
                "reason": "HTTP 503: overloaded",
                "count": 1,
                "example": "HTTP 503: overloaded",
            },
        ],
    )
    page = client.get(f"/results/{result.pk}/").content.decode()
    table = _table(page)
    assert html.escape(VLLM_TOO_LONG) in table
    rows = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r) for r in table.split("<tr")[2:]]
    assert len(rows) == 3  # two reasons and the one failure they leave out
    assert rows[0] == [
        str(trial.index),
        f"{trial.concurrency:,}",
        f"{trial.metrics['requests']:,}",
        "13",
        "http_status",
        "11",
        html.escape(VLLM_TOO_LONG),
    ]
    assert rows[1][-2:] == ["1", "HTTP 503: overloaded"]
    assert rows[2][-2:] == ["1", "other reasons"]


@pytest.mark.django_db
def test_a_trial_stored_before_reasons_shows_its_classes_and_no_trial_without_failures_shows(
    client,
):
    result = make_published_result(accelerators=2)
    metrics = result.run.trials.order_by("index").last().metrics
    assert metrics["failed"] == 0
    page = client.get(f"/results/{result.pk}/").content.decode()
    assert 'id="t-failed_requests"' not in page  # nothing failed: no table

    stored = {k: v for k, v in metrics.items() if k != "error_reasons"}
    result = make_published_result(accelerators=2)
    trial = result.run.trials.order_by("index").last()
    trial.metrics = {**stored, "failed": 2, "errors_by_class": {"disconnect": 2}}
    trial.save(update_fields=["metrics"])
    table = _table(client.get(f"/results/{result.pk}/").content.decode())
    assert "disconnect" in table and "not recorded" in table
