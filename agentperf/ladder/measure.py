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
from agentperf.ladder.document import Generate
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

        gen = Generate.model_validate(ds["generate"])  # the file's values, the defaults once
        counter = TokenCounter()
        corpus = build_corpus(counter, discover=False)
        trajectories = generate_dataset(
            seed=gen.seed,
            trajectories=gen.trajectories,
            corpus=corpus,
            counter=counter,
            params=SHAPES[gen.shape],
        ).trajectories
    kind = ds.get("output_kind")
    if kind:
        # a chat-like workload: every turn's text is of one kind
        trajectories = with_output_kind(trajectories, kind)
    cache[key] = trajectories
    return trajectories


def _rung_target(spec: LadderSpec, plan: RungPlan, rung_dir: Path) -> tuple[Target, str, int]:
    """The rung's target, served model name and accelerator count: the patched profile on
    the twin (written beside the rung's results) or the endpoint."""
    cfg = plan.config
    if cfg.profile_doc is not None:
        profile_path = rung_dir / "profile.yaml"
        profile_path.write_text(yaml.safe_dump(cfg.profile_doc, sort_keys=False))
        profile = profile_from_dict(cfg.profile_doc)
        target = Target(sim_profile=str(profile_path), seed=spec.seed)
        model = spec.model or profile.served_model_names[0]
        return target, model, spec.accelerators or profile.accelerators_used
    target = Target.parse(cfg.target, api_key=spec.api_key, seed=spec.seed)
    return target, spec.model or "", spec.accelerators or 1


def _trial_base(spec: LadderSpec, target: Target, model: str, accelerators: int) -> TrialConfig:
    """Every trial's config but its concurrency: the ladder's windows, seed and ramp."""
    tp = spec.trials
    return TrialConfig(
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


@dataclasses.dataclass
class _RungTrials:
    """One rung's trials as they finish: the server's counters scraped at each window's
    start and end, and each trial reduced to a :class:`TrialMeasure`."""

    spec: LadderSpec
    target: Target
    accelerators: int
    log: Callable[[str], None]
    scrapes: dict[tuple[int, str], str | None] = dataclasses.field(default_factory=dict)
    threads: list[threading.Thread] = dataclasses.field(default_factory=list)
    measures: list[TrialMeasure] = dataclasses.field(default_factory=list)

    def scrape(self, index: int, mark: str, transport: Any) -> None:
        """The server's counters at a window mark: the twin's at once, an endpoint's
        /metrics on a thread (no figures when it has none)."""
        text = getattr(transport, "metrics_text", None)
        if callable(text):  # the simulator: its counters in /metrics format, no I/O
            self.scrapes[(index, mark)] = text()
            return
        base_url = self.target.base_url
        if base_url is None:
            return

        def fetch() -> None:
            try:
                self.scrapes[(index, mark)] = scrape_metrics(base_url, api_key=self.spec.api_key)
            except Exception:  # an endpoint without /metrics: no server figures
                self.scrapes[(index, mark)] = None

        th = threading.Thread(target=fetch, daemon=True)
        th.start()
        self.threads.append(th)

    def reduce(self, index: int, result: Any) -> None:
        """A finished trial as its point, server figures and bootstrap replicates."""
        for th in self.threads:
            th.join(timeout=30)
        s = result.summary
        spec = self.spec
        speeds, thr, k = bootstrap_trial(
            result.records,
            s.window_start_ns,
            s.window_end_ns,
            self.accelerators,
            spec.resamples,
            seed=spec.seed,
            concurrency=result.concurrency,
        )
        text = self.scrapes.get((index, "start")), self.scrapes.get((index, "end"))
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
        self.measures.append(m)
        self.log(
            f"  N={m.concurrency}: p25 {m.p25_speed:.1f} tok/s, "
            f"{m.throughput:,.0f} tok/s per accelerator"
        )


def _run_fixed(rung: _RungTrials, trajectories: Any, base: TrialConfig) -> None:
    """The plan's fixed concurrencies, in order, stopping after the first trial slower
    than ``stop_below``."""
    spec, tp = rung.spec, rung.spec.trials

    async def main(transport: Any, clock: Any) -> None:
        for index, n in enumerate(tp.concurrencies):
            config = config_for_trial(base, n, index)

            def marks(mark: str, t_ns: int, i: int = index) -> None:
                rung.scrape(i, mark, transport)

            result = await run_trial(
                transport, clock, trajectories, config, spec.tiers, on_window=marks
            )
            rung.reduce(index, result)
            if tp.stop_below is not None and result.summary.p25_output_speed < tp.stop_below:
                break

    run_on_target(rung.target, main)


def _run_search(rung: _RungTrials, trajectories: Any, base: TrialConfig, cap: int) -> None:
    """A capped search (docs/engine.md "search"), each trial reduced as it finishes."""
    counter = iter(range(10**9))
    search_job(
        target=rung.target,
        trajectories=trajectories,
        tiers=rung.spec.tiers,
        base=base,
        cap=cap,
        max_trials=rung.spec.trials.search_max_trials,
        on_trial_result=lambda result: rung.reduce(next(counter), result),
        on_window=lambda i, mark, t, transport: rung.scrape(i, mark, transport),
    )


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
    rung_dir = out_dir / "rungs" / plan.digest[:16]
    rung_dir.mkdir(parents=True, exist_ok=True)
    target, model, accelerators = _rung_target(spec, plan, rung_dir)
    trajectories = _load_dataset(spec, plan.config.dataset, datasets)
    base = _trial_base(spec, target, model, accelerators)
    rung = _RungTrials(spec, target, accelerators, log)
    if spec.trials.search_cap is None:
        _run_fixed(rung, trajectories, base)
    else:
        _run_search(rung, trajectories, base, spec.trials.search_cap)
    out = rung.measures
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
