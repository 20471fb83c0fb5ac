"""The qualification of a deployment before any load (docs/verification.md): the context
pre-flight, the probes, the HumanEval task check idle and under load, and the worker's
`RunnerInfo` that goes with the report."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import platform
import socket
from typing import Any

from agentperf import contract
from agentperf.engine.jobs import run_on_target
from agentperf.engine.preflight import check_context, http_fetch
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.trajectory import Dataset
from agentperf.engine.transport import Clock, Transport
from agentperf.engine.trial import run_trial
from agentperf.verification.status import WARN
from agentperf.verification.taskcheck import collect_completions
from runner.launchers import Endpoint
from runner.verification.probes import (
    check,
    distribution_probe,
    extended_probes,
    model_listed_check,
    run_probes,
)
from runner.verification.taskrun import score
from runner.worker.failures import RunFailure
from runner.worker.trials import target_of

log = logging.getLogger(__name__)


def context_preflight(endpoint: Endpoint, dataset: Dataset, replay: ReplayConfig) -> None:
    """Fail the run, before any load, when a turn of the dataset cannot fit the server's
    context, naming the turns (docs/engine.md "Context pre-flight"). A platform run has no
    opt-out: its qualification's context_fits probe fails such a run anyway, on its longest
    prompt alone. On virtual time there is no server to ask."""
    if endpoint.virtual or not endpoint.base_url:
        return
    fetch = http_fetch(endpoint.base_url, api_key=endpoint.api_key, connect=endpoint.connect)
    checked = check_context(dataset.trajectories, replay, fetch, base_url=endpoint.base_url)
    if not checked.fits:
        raise RunFailure(
            "context pre-flight: "
            + checked.refusal("the dataset or the deployment's context must change")
        )
    log.info("%s", checked.line())


def qualify(
    endpoint: Endpoint, dataset: Dataset | None = None, *, reference: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    models = None if endpoint.virtual else endpoint.info.get("models")
    checks = [model_listed_check(endpoint.served_model_name, models)]

    async def main(transport: Transport, clock: Clock) -> list[dict[str, Any]]:
        model = endpoint.served_model_name
        basic = await run_probes(transport, clock, model=model)
        extended = await extended_probes(
            transport,
            clock,
            model=model,
            dataset=dataset,
            max_model_len=endpoint.info.get("max_model_len"),
        )
        if reference and reference.get("distributions"):
            extended.append(
                await distribution_probe(transport, clock, model=model, reference=reference)
            )
        return basic + extended

    if checks[0]["status"] != "fail":
        checks += run_on_target(target_of(endpoint), main)
    return checks


def task_check(
    endpoint: Endpoint, problems: list[dict[str, Any]], *, phase: str, load: Any = None
) -> dict[str, Any]:
    """HumanEval through the deployment, executed in the sandbox: idle, or while the
    search's highest passing concurrency is replayed (docs/verification.md "quality_task")."""
    model = endpoint.served_model_name
    concurrency = None
    load_note = ""
    if load is not None:
        dataset, base, tiers, result = load
        passing = [t.concurrency for t in result.trials if any(t.verdicts.values())]
        measured = [t.concurrency for t in result.trials]
        if not measured:
            return check(
                f"task_{phase}",
                WARN,
                "the search ran no trial: nothing to load",
                fatal=False,
                evidence={},
            )
        # no tier passed (a slow host): the lowest measured load still busies the server
        concurrency = max(passing) if passing else min(measured)
        load_note = "" if passing else " (no concurrency passed a tier: the lowest measured)"
        config = dataclasses.replace(base, concurrency=concurrency, duration_s=24 * 3600.0)

    async def main(transport: Transport, clock: Clock) -> list[dict[str, Any]]:
        if load is None:
            return await collect_completions(
                transport, clock, model=model, problems=problems, tag=phase
            )
        running = asyncio.ensure_future(
            run_trial(transport, clock, dataset.trajectories, config, tiers)
        )
        try:
            await clock.sleep(min(float(config.warmup_s), 30.0))  # the load is up first
            return await collect_completions(
                transport, clock, model=model, problems=problems, tag=phase
            )
        finally:
            running.cancel()
            with contextlib.suppress(BaseException):
                await running

    completions = run_on_target(target_of(endpoint), main)
    scored = score(problems, completions)
    if concurrency is not None:
        scored["concurrency"] = concurrency
    where = (
        f" with {concurrency} agents loading the deployment{load_note}"
        if concurrency
        else " (idle)"
    )
    return check(
        f"task_{phase}",
        "pass",
        f"HumanEval pass@1 {scored['passed']}/{scored['problems']}{where}",
        fatal=False,
        evidence=scored,
    )


def runner_info(
    endpoint: Endpoint | None = None, dataset: Dataset | None = None
) -> contract.RunnerInfo:
    """The worker about itself; with the endpoint (its model list left out) and what was
    really replayed (verification compares it with the recorded digest)."""
    info = contract.RunnerInfo(
        hostname=socket.gethostname(),
        pid=os.getpid(),
        python=platform.python_version(),
        platform=platform.platform(),
        cpus=os.cpu_count(),
    )
    if endpoint is not None:
        info.endpoint = contract.Endpoint.model_validate(
            {k: v for k, v in endpoint.info.items() if k not in ("models", "runtime")}
        )
    if dataset is not None:
        info.dataset = contract.ReplayedDataset(
            name=dataset.name,
            version=dataset.version,
            sha256=dataset.digest(),
            trajectories=len(dataset.trajectories),
        )
    return info


def qualification_report(
    checks: list[dict[str, Any]], info: contract.RunnerInfo
) -> contract.QualificationReport:
    return contract.QualificationReport(
        checks=[contract.Check.model_validate(c) for c in checks], runner_info=info
    )
