"""What the pool worker turns a run's search options into (no services needed)."""

from __future__ import annotations

from runner.worker.execute import trial_config


def _spec(**search: object) -> dict:
    options = {
        "warmup_s": 60.0,
        "duration_s": 60.0,
        "min_requests": 20,
        "max_loop_lag_ms": 25.0,
        "max_cpu_percent": 90.0,
        "tool_delay_scale": 1.0,
        "request_timeout_s": 600.0,
    }
    options.update(search)
    return {"search": options, "accelerators": {"used": 72, "total": 72}, "run_id": 7}


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
