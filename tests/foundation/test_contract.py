"""The contract between the web tier and the pool hosts (agentperf/contract.py,
docs/pipeline.md "The contract"): documents built from the engine's own objects round-trip
key for key; an unknown field, a missing one or a value of the wrong type is refused by
its path; the models mirror the engine dataclasses they carry."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from pydantic import BaseModel, ValidationError

from agentperf import contract
from agentperf.engine.metrics import NS, ClientHealth, RequestRecord, TrialSummary
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.search import SearchResult, SearchTrial, TierResult, tier_results
from agentperf.engine.trial import Tier, TierVerdict, TrialConfig, TrialResult, judge_trial

TIERS = [Tier("20 tok/s", 20.0, 10.0), Tier("100 tok/s", 100.0, 5.0, ttft_percentile=90.0)]
WARMUP_S, WINDOW_S = 5.0, 30.0


def records(concurrency: int, speed: float) -> list[RequestRecord]:
    """Each agent sends a 100-token request every 3 s over warm-up, window and drain."""
    out = []
    for agent in range(concurrency):
        for k in range(int((WARMUP_S + WINDOW_S) / 3)):
            t = int((agent * 0.1 + 3 * k) * NS)
            first = t + int(0.5 * NS)
            last = first + int(99 / speed * NS)
            out.append(
                RequestRecord(
                    request_id=f"r{agent}-{k}",
                    agent_id=agent,
                    session_id=f"s{agent}",
                    trajectory_id="t",
                    turn_index=k,
                    target_output_tokens=100,
                    t_send_ns=t,
                    t_first_ns=first,
                    t_last_ns=last,
                    t_end_ns=last + 1000,
                    n_reads=100,
                    n_output_events=100,
                    n_in=1000,
                    n_out=100,
                    n_cached=0,
                    local_prompt_tokens=1000,
                    ok=True,
                )
            )
    return out


def engine_trial(concurrency: int = 3, speed: float = 60.0) -> TrialResult:
    """A trial judged by the engine itself from synthetic records."""
    records_ = records(concurrency, speed)
    config = TrialConfig(
        concurrency=concurrency,
        warmup_s=WARMUP_S,
        duration_s=WINDOW_S,
        accelerators=2,
        replay=ReplayConfig(model="m"),
        min_requests=5,
        bootstrap_resamples=50,
    )
    window = (int(WARMUP_S * NS), int((WARMUP_S + WINDOW_S) * NS))
    return judge_trial(
        records_, config, TIERS, window=window, client=ClientHealth(), simulated=False
    )


def trial_report(result: TrialResult, index: int = 0) -> contract.TrialReport:
    """What the worker posts for `result`: its own builder (runner/worker/director.py), from
    the search's trial whose data is the engine's TrialResult.to_dict()."""
    from runner.worker.trials import trial_report as build

    trial = SearchTrial(
        index,
        result.concurrency,
        "ramp",
        {k: v.passed for k, v in result.verdicts.items()},
        result.to_dict(),
    )
    raw = {
        "key": "runs/1/a1/raw/trial-000.jsonl.gz",
        "sha256": "a" * 64,
        "size": 120,
        "count": len(result.records),
        "trial_index": index,
    }
    telemetry = {"measured": False, "reason": "not measured: no accelerator telemetry"}
    return build(trial, raw, telemetry)


def run_spec_doc() -> dict:
    return {
        "version": 1,
        "run_id": 42,
        "submission_id": 17,
        "pool": "simulated",
        "launcher": {
            "kind": "simulated",
            "profile": "tiny",
            "seed": 1,
            "clock": "real",
            "served_model_name": "tiny-1b",
            "profile_label": "Tiny",
            "accelerators_used": 1,
            "accelerators_total": 1,
        },
        "model": {"slug": "deepseek-v4.1-flash-max", "served_model_name": "tiny-1b"},
        "tier_set": {"slug": "agentperf-default-v1", "version": 1},
        "tiers": [t.to_dict() for t in TIERS],
        "accelerators": {"used": 1, "total": None},
        "search": {
            "warmup_s": 3.0,
            "duration_s": 10,
            "cap": 16,
            "max_trials": 8,
            "min_requests": 8,
            "tool_delay_scale": 1.0,
            "request_timeout_s": 120.0,
            "max_loop_lag_ms": 100.0,
            "max_cpu_percent": 90.0,
            "api": "chat",
            "seed": 0,
            "task_problems": 164,
            "shards": 1,
            "loadgen_hosts": [],
        },
        "loadgen": {"shards": 1, "hosts": [], "queue": None},
        "heartbeat_interval_s": 15,
        "telemetry_interval_s": 1.0,
        "limits": {"soft_s": 900, "hard_s": 1000},
        "simulated": True,
    }


def _fields(exc: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return contract.error_fields(exc.value)


# --- round trips -------------------------------------------------------------------------


def test_a_trial_report_from_the_engine_round_trips_through_json_key_for_key():
    result = engine_trial()
    report = trial_report(result)
    wire = json.loads(json.dumps(report.dump()))
    again = contract.TrialReport.model_validate(wire)
    assert again == report and again.dump() == wire
    # the stored metrics are the engine's summary, unchanged, plus the extra sections
    summary = result.summary.to_dict()
    assert {k: wire["metrics"][k] for k in summary} == json.loads(json.dumps(summary))
    assert wire["verdicts"] == {k: v.to_dict() for k, v in result.verdicts.items()}
    assert contract.trial_metrics(wire["metrics"]).p25_output_speed == pytest.approx(
        result.summary.p25_output_speed
    )
    assert {k: v.passed for k, v in contract.trial_verdicts(wire["verdicts"]).items()} == {
        k: v.passed for k, v in result.verdicts.items()
    }


def test_the_run_spec_round_trips_and_stores_no_token_or_presigned_url():
    doc = run_spec_doc()
    spec = contract.RunSpec.model_validate(doc)
    assert spec.dump() == doc
    message = spec.model_copy(
        update={
            "api": contract.ApiRef(base_url="https://site/api/v1/runner/runs/42/", seed="s" * 43),
            "dataset": contract.DatasetRef(
                name="d",
                version="1",
                sha256="b" * 64,
                file_sha256="c" * 64,
                size=10,
                url="https://s/d",
            ),
        }
    )
    wire = json.loads(json.dumps(message.dump()))
    assert wire["api"]["seed"] == "s" * 43 and wire["dataset"]["size"] == 10
    assert contract.RunSpec.model_validate(wire).stored() == doc
    assert "s" * 43 not in json.dumps(contract.RunSpec.model_validate(wire).stored())
    assert spec.engine_tiers() == TIERS


def test_a_search_summary_is_the_engines_search_result_without_trial_data():
    trials = [
        SearchTrial(0, 1, "ramp", {"20 tok/s": True, "100 tok/s": False}, {"summary": {}}),
        SearchTrial(1, 2, "ramp", {"20 tok/s": False, "100 tok/s": False}, {"x": 1}),
    ]
    tiers = tier_results(trials, [t.name for t in TIERS], cap=2, confirm=False)
    result = SearchResult(trials, tiers, cap=2, flags=[])
    summary = contract.SearchSummary.of(result)
    doc = result.to_dict()
    assert summary.dump() == {
        **doc,
        "trials": [{k: v for k, v in t.items() if k != "data"} for t in doc["trials"]],
    }
    assert summary.max_agents == {"20 tok/s": 1, "100 tok/s": 0}


def test_progress_takes_what_the_worker_beats_and_nothing_else():
    beat = {
        "phase": "search",
        "attempt": 1,
        "trials_done": 2,
        "search_phase": "bisect",
        "trial": 3,
        "max_trials": 8,
        "concurrency": 6,
        "last_verdicts": {"20 tok/s": True},
        "last_trial": {"index": 1, "concurrency": 4, "p25_output_speed": 40.5, "error_rate": 0.0},
        "last_failed_attempt": {"trial": 2, "attempt": 1, "reason": "shard 1 died"},
    }
    assert contract.Heartbeat.model_validate({"progress": beat}).dump() == {"progress": beat}
    with pytest.raises(ValidationError) as exc:
        contract.Progress.model_validate({**beat, "trial_k": 3})
    assert _fields(exc) == {"trial_k": ["unknown field"]}


# --- refusals by path ------------------------------------------------------------------------


def test_a_misspelled_field_is_refused_by_its_path():
    doc = trial_report(engine_trial()).dump()
    name = next(iter(doc["verdicts"]))
    doc["verdicts"][name]["pass"] = doc["verdicts"][name].pop("passed")
    doc["metrics"]["p25_speed"] = doc["metrics"].pop("p25_output_speed")
    with pytest.raises(ValidationError) as exc:
        contract.TrialReport.model_validate(doc)
    assert _fields(exc) == {
        f"verdicts.{name}.passed": ["required field missing"],
        f"verdicts.{name}.pass": ["unknown field"],
        "metrics.p25_output_speed": ["required field missing"],
        "metrics.p25_speed": ["unknown field"],
    }


@pytest.mark.parametrize(
    ("path", "drop"),
    [
        ("raw_records.count", lambda d: d["raw_records"].pop("count")),
        ("metrics.client.healthy", lambda d: d["metrics"]["client"].pop("healthy")),
        ("telemetry", lambda d: d.pop("telemetry")),
        ("index", lambda d: d.pop("index")),
    ],
)
def test_a_missing_field_is_named(path, drop):
    doc = trial_report(engine_trial()).dump()
    drop(doc)
    with pytest.raises(ValidationError) as exc:
        contract.TrialReport.model_validate(doc)
    assert _fields(exc) == {path: ["required field missing"]}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("concurrency", "3"),  # a string is not an integer
        ("index", True),  # a boolean is not an integer
        ("phase", "warmup"),  # not a search phase
        ("raw_records.sha256", "not-a-digest"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_not_coerced(path, value):
    doc = trial_report(engine_trial()).dump()
    head, _, tail = path.partition(".")
    if tail:
        doc[head][tail] = value
    else:
        doc[head] = value
    with pytest.raises(ValidationError) as exc:
        contract.TrialReport.model_validate(doc)
    assert list(_fields(exc)) == [path]


def test_a_verdict_as_a_bare_bool_is_refused():
    doc = trial_report(engine_trial()).dump()
    name = next(iter(doc["verdicts"]))
    doc["verdicts"][name] = True
    with pytest.raises(ValidationError) as exc:
        contract.TrialReport.model_validate(doc)
    assert list(_fields(exc)) == [f"verdicts.{name}"]
    with pytest.raises(ValidationError):
        contract.trial_verdicts({name: {"pass": True, "reasons": []}})


def test_fields_sent_and_never_stored_are_not_part_of_the_contract():
    doc = trial_report(engine_trial()).dump()
    for extra in ("config", "simulated"):
        with pytest.raises(ValidationError) as exc:
            contract.TrialReport.model_validate({**doc, extra: {}})
        assert _fields(exc) == {extra: ["unknown field"]}
    with pytest.raises(ValidationError) as exc:
        contract.RawRecordsRef.model_validate({**doc["raw_records"], "trial_index": 0})
    assert _fields(exc) == {"trial_index": ["unknown field"]}


def test_the_run_spec_refuses_an_unknown_launcher_kind_and_a_stray_search_option():
    doc = run_spec_doc()
    doc["launcher"]["kind"] = "docker"
    with pytest.raises(ValidationError) as exc:
        contract.RunSpec.model_validate(doc)
    assert list(_fields(exc)) == ["launcher"]
    doc = run_spec_doc()
    doc["search"]["warmup"] = 3.0
    with pytest.raises(ValidationError) as exc:
        contract.RunSpec.model_validate(doc)
    assert _fields(exc) == {"search.warmup": ["unknown field"]}
    doc = copy.deepcopy(run_spec_doc())
    doc["version"] = 2
    with pytest.raises(ValidationError):
        contract.RunSpec.model_validate(doc)


# --- the models mirror the engine -------------------------------------------------------


def _names(cls: type) -> set[str]:
    """An engine type's fields: a dataclass's, or a pydantic model's (ClientHealth and
    TierVerdict, which the contract's are: test below)."""
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return set(cls.model_fields)
    return {f.name for f in dataclasses.fields(cls)}


def test_the_contracts_verdict_and_client_health_are_the_engines_models_made_complete():
    """No mirror: the contract's TierVerdict and ClientHealth subclass the engine's models,
    whose defaults serve the engine; in the contract every field is required."""
    assert issubclass(contract.TierVerdict, TierVerdict)
    assert issubclass(contract.ClientHealth, ClientHealth)
    assert not TierVerdict.model_fields["marginal"].is_required()
    assert all(f.is_required() for f in contract.TierVerdict.model_fields.values())
    assert all(f.is_required() for f in contract.ClientHealth.model_fields.values())
    verdict = TierVerdict(passed=False, reasons=["slow"])  # infinite TTFT: null in JSON
    assert contract.TierVerdict.of(verdict).dump() == verdict.to_dict()
    assert verdict.to_dict()["ttft_s"] is None
    assert contract.trial_verdicts({"t": verdict.to_dict()})["t"].ttft_s == float("inf")


@pytest.mark.parametrize(
    ("model", "engine"),
    [
        (contract.TierVerdict, TierVerdict),
        (contract.ClientHealth, ClientHealth),
        (contract.Tier, Tier),
        (contract.TierResult, TierResult),
    ],
)
def test_a_model_has_exactly_the_fields_of_the_engine_dataclass_it_carries(model, engine):
    assert set(model.model_fields) == _names(engine)


def test_trial_metrics_carry_every_field_of_the_engine_summary_and_only_named_extras():
    extras = {"statistics", "load_generator", "power_w", "modelled_energy"}
    assert set(contract.TrialMetrics.model_fields) == _names(TrialSummary) | extras
    assert issubclass(contract.TrialMetrics, TrialSummary)  # declared once, in the engine
    assert set(contract.SummaryTrial.model_fields) == _names(SearchTrial) - {"data"}


# --- the worker builds them ---------------------------------------------------------------


class _Api:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def report(self, path: str, document: contract.Contract) -> dict:
        self.sent.append((path, document.dump()))
        return {"cancel": False}

    def heartbeat(self, document: contract.Heartbeat) -> bool:  # runner/worker/reporter.py
        return bool(self.report("heartbeat", document)["cancel"])


def test_the_worker_beats_its_progress_as_the_contract_and_refuses_a_misspelled_field():
    from runner.worker.heartbeat import Heartbeat

    api = _Api()
    beat = Heartbeat(api, interval_s=60)  # type: ignore[arg-type]
    beat.update(phase="search", search_phase="ramp", trial=1, max_trials=8, concurrency=1)
    assert api.sent == [
        (
            "heartbeat",
            {
                "progress": {
                    "phase": "search",
                    "search_phase": "ramp",
                    "trial": 1,
                    "max_trials": 8,
                    "concurrency": 1,
                }
            },
        )
    ]
    with pytest.raises(ValidationError) as exc:
        beat.update(trails_done=1)
    assert _fields(exc) == {"trails_done": ["unknown field"]}
    assert len(api.sent) == 1 and "trails_done" not in beat.progress


def test_the_worker_refuses_a_run_spec_that_does_not_fit_the_contract():
    from runner.worker.execute import RunExecution, RunFailure

    doc = run_spec_doc()
    doc["search"]["cap"] = "16"
    with pytest.raises(RunFailure, match="search.cap"):
        RunExecution(doc)
