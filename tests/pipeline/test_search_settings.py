"""What the pool worker turns a run's search options into (no services needed)."""

from __future__ import annotations

from agentperf.contract import RunSpec
from runner.worker.trials import trial_config
from tests.foundation.test_contract import run_spec_doc


def _run_spec(search: dict, accelerators: int, run_id: int) -> RunSpec:
    """The worker's RunSpec with these search options (the rest: a simulated run's)."""
    doc = run_spec_doc()
    doc.update(search=search, accelerators={"used": accelerators, "total": accelerators})
    return RunSpec.model_validate({**doc, "run_id": run_id})


def _spec(**search: object) -> RunSpec:
    options = {
        "warmup_s": 60.0,
        "duration_s": 60.0,
        "cap": 16,
        "max_trials": 8,
        "min_requests": 20,
        "max_loop_lag_ms": 25.0,
        "max_cpu_percent": 90.0,
        "tool_delay_scale": 1.0,
        "request_timeout_s": 600.0,
    }
    options.update(search)
    return _run_spec(options, 72, 7)


def test_a_primed_cache_is_asked_for_only_on_virtual_time() -> None:
    spec = _spec(prime_cache=True, ramp_s=30.0)
    virtual = trial_config(spec, "m", virtual=True)
    assert virtual.replay.prime_cache is True
    assert virtual.replay.ramp_s == 30.0
    assert (virtual.warmup_s, virtual.duration_s, virtual.accelerators) == (60.0, 60.0, 72)
    # a real endpoint cannot prime: the option is ignored rather than failing the run
    assert trial_config(spec, "m", virtual=False).replay.prime_cache is False
    assert trial_config(_spec(), "m", virtual=True).replay.prime_cache is False


def test_the_virtual_pool_defaults_prime_and_reach_rack_scale() -> None:
    from config import settings as project  # the shipped defaults, not a test's override

    virtual = project.RUN_SEARCH_OPTIONS_BY_POOL["simulated-virtual"]
    assert virtual["prime_cache"] is True
    assert virtual["cap"] >= 8192  # a 72-GPU rack serves thousands of agents
    assert virtual["ramp_s"] < virtual["warmup_s"]


def test_with_the_shipped_virtual_defaults_one_agent_sends_enough_requests() -> None:
    # The search's first trial is N=1: if one agent cannot send min_requests in the window,
    # every tier fails there and a dry run ends with nothing (a 60 s window gave 17 < 20 for
    # the demo's 8-GPU H100 profile on the full-shape test set).
    import dataclasses

    from agentperf.engine.datasets.synthetic import ShapeParams, generate_dataset
    from agentperf.engine.jobs import Target, trial_job
    from config import settings as project

    options = {
        **project.RUN_SEARCH_OPTIONS,
        **project.RUN_SEARCH_OPTIONS_BY_POOL["simulated-virtual"],
    }
    spec = _run_spec(options, 8, 1)
    config = trial_config(spec, "deepseek-v4.1-flash-max", virtual=True)
    config = dataclasses.replace(config, concurrency=1, bootstrap_resamples=0)
    dataset = generate_dataset(  # the full-shape private test set, as the pipeline makes it
        seed=project.RUN_DATASET_SEED,
        trajectories=project.RUN_DATASET_TRAJECTORIES,
        params=ShapeParams(),
        name="t",
        version="1",
    )
    result = trial_job(
        target=Target(sim_profile="h100-sxm-hgx8-dsv41-flash"),
        trajectories=dataset.trajectories,
        config=config,
    )
    assert result.summary.requests >= options["min_requests"]
