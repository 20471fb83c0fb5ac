"""Measuring a ladder (docs/engine.md "ladder"): each rung's trials run on its target
(fixed concurrencies or a capped search) and are reduced to their points, server figures
and bootstrap replicates (``agentperf.ladder.attribute.TrialMeasure``); ``run_ladder`` measures
every rung of every order (and of every band sample), reusing a digest measured before, and
writes ladder.json and ladder.html.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from agentperf.engine.datasets.synthetic import SHAPES
from agentperf.engine.jobs import Target, config_for_trial, run_on_target, search_job
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.trajectory import DatasetError, load_dataset, with_output_kind
from agentperf.engine.trial import TrialConfig, run_trial
from agentperf.ladder.attribute import TrialMeasure, bootstrap_trial, carry_band, ladder_document
from agentperf.ladder.plan import RungPlan, plan_rungs
from agentperf.ladder.report import ladder_html
from agentperf.ladder.spec import LadderError, LadderSpec
from agentperf.mergepatch import merge_patch
from agentperf.simulator.profile import profile_from_dict
from agentperf.verification.speculative import (
    parse_metrics,
    prefix_cache_hit_rate,
    scrape_metrics,
    spec_figures,
    window_delta,
)


def _server_figures(start: str | None, end: str | None) -> dict[str, Any]:
    if start is None or end is None:
        return {"scraped": False}
    delta = window_delta(parse_metrics(start), parse_metrics(end))
    spec = spec_figures(delta)
    return {
        "scraped": True,
        "spec_acceptance": None if spec is None else spec.get("acceptance_rate"),
        "mean_acceptance_length": None if spec is None else spec.get("mean_acceptance_length"),
        "prefix_cache_hit_rate": prefix_cache_hit_rate(delta),
    }


def server_figures_parsed(
    start: dict[str, float] | None, end: dict[str, float] | None
) -> dict[str, Any]:
    """``_server_figures`` from counters already parsed (the platform's stored scrapes)."""
    if not start or not end:
        return {"scraped": False}
    delta = window_delta(start, end)
    spec = spec_figures(delta)
    return {
        "scraped": True,
        "spec_acceptance": None if spec is None else spec.get("acceptance_rate"),
        "mean_acceptance_length": None if spec is None else spec.get("mean_acceptance_length"),
        "prefix_cache_hit_rate": prefix_cache_hit_rate(delta),
    }


def _load_dataset(spec: LadderSpec, ds: dict[str, Any], cache: dict[str, Any]) -> Any:
    key = orjson.dumps(ds, option=orjson.OPT_SORT_KEYS).decode()
    if key in cache:
        return cache[key]
    if "path" in ds:
        path = Path(ds["path"])
        path = path if path.is_absolute() else spec.base_dir / path
        try:
            trajectories = load_dataset(path).trajectories
        except FileNotFoundError:
            raise LadderError(f"dataset.path: not found: {ds['path']}") from None
        except DatasetError as exc:
            raise LadderError(f"dataset.path: {exc}") from None
    else:
        from agentperf.engine.datasets.corpus import build_corpus
        from agentperf.engine.datasets.synthetic import generate_dataset
        from agentperf.engine.tokens import TokenCounter

        gen = ds["generate"]
        counter = TokenCounter()
        corpus = build_corpus(counter, discover=False)
        trajectories = generate_dataset(
            seed=gen.get("seed", 1),
            trajectories=gen.get("trajectories", 200),
            corpus=corpus,
            counter=counter,
            params=SHAPES[gen.get("shape", "coding")],
        ).trajectories
    kind = ds.get("output_kind")
    if kind:
        # a chat-like workload: every turn's text is of one kind
        trajectories = with_output_kind(trajectories, kind)
    cache[key] = trajectories
    return trajectories


def measure_rung(
    spec: LadderSpec,
    plan: RungPlan,
    out_dir: Path,
    datasets: dict[str, Any],
    *,
    log: Callable[[str], None] = lambda _: None,
) -> list[TrialMeasure]:
    """Run the rung's trials (fixed concurrencies or a capped search) and reduce each to its
    point, server figures and bootstrap replicates; raw records are not kept."""
    cfg = plan.config
    rung_dir = out_dir / "rungs" / plan.digest[:16]
    rung_dir.mkdir(parents=True, exist_ok=True)
    if cfg.profile_doc is not None:
        profile_path = rung_dir / "profile.yaml"
        profile_path.write_text(yaml.safe_dump(cfg.profile_doc, sort_keys=False))
        profile = profile_from_dict(cfg.profile_doc)
        target = Target(sim_profile=str(profile_path), seed=spec.seed)
        model = spec.model or profile.served_model_names[0]
        accelerators = spec.accelerators or profile.accelerators_used
    else:
        target = Target.parse(cfg.target, api_key=spec.api_key, seed=spec.seed)
        model = spec.model or ""
        accelerators = spec.accelerators or 1
    trajectories = _load_dataset(spec, cfg.dataset, datasets)
    tp = spec.trials
    base = TrialConfig(
        concurrency=1,
        warmup_s=tp.warmup_s,
        duration_s=tp.duration_s,
        accelerators=accelerators,
        min_requests=tp.min_requests,
        replay=ReplayConfig(
            model=model, seed=spec.seed, ramp_s=tp.ramp_s, prime_cache=target.simulated
        ),
        bootstrap_resamples=0,
    )
    scrapes: dict[tuple[int, str], str | None] = {}
    threads: list[threading.Thread] = []
    out: list[TrialMeasure] = []

    def scrape(index: int, mark: str, transport: Any) -> None:
        text = getattr(transport, "metrics_text", None)
        if callable(text):  # the simulator: its counters in /metrics format, no I/O
            scrapes[(index, mark)] = text()
            return
        if target.base_url is None:
            return

        def fetch() -> None:
            try:
                scrapes[(index, mark)] = scrape_metrics(target.base_url or "", api_key=spec.api_key)
            except Exception:  # an endpoint without /metrics: no server figures
                scrapes[(index, mark)] = None

        th = threading.Thread(target=fetch, daemon=True)
        th.start()
        threads.append(th)

    def reduce(index: int, result: Any) -> None:
        for th in threads:
            th.join(timeout=30)
        s = result.summary
        speeds, thr, k = bootstrap_trial(
            result.records,
            s.window_start_ns,
            s.window_end_ns,
            accelerators,
            spec.resamples,
            seed=spec.seed,
            concurrency=result.concurrency,
        )
        text = scrapes.get((index, "start")), scrapes.get((index, "end"))
        server = _server_figures(*text) if all(isinstance(x, str) for x in text) else {}
        m = TrialMeasure(
            index=index,
            concurrency=result.concurrency,
            p25_speed=s.p25_output_speed,
            throughput=s.throughput_per_accelerator,
            error_rate=s.error_rate,
            ttft_s={kk: (None if math.isinf(v) else v) for kk, v in s.ttft_s.items()},
            requests=s.requests,
            sessions=k,
            verdicts={name: v.passed for name, v in result.verdicts.items()},
            server=server or {"scraped": False},
            speed_reps=speeds,
            throughput_reps=thr,
        )
        out.append(m)
        log(
            f"  N={m.concurrency}: p25 {m.p25_speed:.1f} tok/s, "
            f"{m.throughput:,.0f} tok/s per accelerator"
        )

    if tp.search_cap is None:

        async def main(transport: Any, clock: Any) -> None:
            for index, n in enumerate(tp.concurrencies):
                config = config_for_trial(base, n, index)

                def marks(mark: str, t_ns: int, i: int = index) -> None:
                    scrape(i, mark, transport)

                result = await run_trial(
                    transport, clock, trajectories, config, spec.tiers, on_window=marks
                )
                reduce(index, result)
                if tp.stop_below is not None and result.summary.p25_output_speed < tp.stop_below:
                    break

        run_on_target(target, main)
    else:
        counter = iter(range(10**9))

        def on_result(result: Any) -> None:
            reduce(next(counter), result)

        search_job(
            target=target,
            trajectories=trajectories,
            tiers=spec.tiers,
            base=base,
            cap=tp.search_cap,
            max_trials=tp.search_max_trials,
            on_trial_result=on_result,
            on_window=lambda i, mark, t, transport: scrape(i, mark, transport),
        )
    (rung_dir / "rung.json").write_bytes(
        orjson.dumps(
            {"digest": plan.digest, "name": plan.name, "trials": [m.to_json() for m in out]},
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
    )
    return out


def load_measured(out_dir: Path, digest: str) -> list[TrialMeasure] | None:
    """A rung measured earlier under the same digest (same config, same conditions)."""
    path = out_dir / "rungs" / digest[:16] / "rung.json"
    if not path.is_file():
        return None
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return None
    if doc.get("digest") != digest:
        return None
    return [TrialMeasure.from_dict(t) for t in doc["trials"]]


# ---------------------------------------------------------------------------- running


def run_ladder(
    spec: LadderSpec,
    out_dir: str | os.PathLike[str],
    *,
    orders: Sequence[str] | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Measure every rung of every order (a digest measured once, here or in an earlier run
    into the same DIR, is reused) and write DIR/ladder.json and DIR/ladder.html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = list(orders or spec.orders)
    plans = {order: plan_rungs(spec, order) for order in chosen}
    measured: dict[str, list[TrialMeasure]] = {}
    reused: dict[str, bool] = {}
    datasets: dict[str, Any] = {}
    for order in chosen:
        for plan in plans[order]:
            if plan.digest in measured:
                reused[plan.digest] = True
                continue
            prior = load_measured(out, plan.digest)
            if prior is not None:
                log(f"rung {plan.name!r} ({order}): reused {plan.digest[:12]}")
                measured[plan.digest], reused[plan.digest] = prior, True
                continue
            log(f"rung {plan.name!r} ({order}): measuring {plan.digest[:12]}")
            measured[plan.digest] = measure_rung(spec, plan, out, datasets, log=log)
    simulated = all(p.config.profile_doc is not None for ps in plans.values() for p in ps)
    doc = ladder_document(spec, plans, measured, reused=reused, simulated=simulated)
    if spec.band:
        samples: dict[str, dict[str, Any]] = {}
        for name, patch in spec.band:
            sspec = dataclasses.replace(
                spec,
                baseline_patch=merge_patch(spec.baseline_patch or {}, patch),
                band=[],
            )
            splans = {order: plan_rungs(sspec, order) for order in chosen}
            for order in chosen:
                for plan in splans[order]:
                    if plan.digest in measured:
                        continue
                    prior = load_measured(out, plan.digest)
                    if prior is not None:
                        measured[plan.digest], reused[plan.digest] = prior, True
                        continue
                    log(f"band {name!r}: rung {plan.name!r} ({order}) {plan.digest[:12]}")
                    measured[plan.digest] = measure_rung(sspec, plan, out, datasets, log=log)
            samples[name] = ladder_document(
                sspec, splans, measured, reused=reused, simulated=simulated
            )
        doc = carry_band(doc, samples)
    (out / "ladder.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    (out / "ladder.html").write_text(ladder_html(doc))
    return doc
