"""The methodology page's figures, read from the code that applies them.

Nothing here restates a number: percentiles, window defaults, client-health limits and the
search's tolerance come from `agentperf.engine` (plain Python), tiers from the database.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re

from agentperf.engine import cachetruth, metrics, search
from agentperf.engine.cli import REAL_DURATION_S, REAL_WARMUP_S, build_parser
from agentperf.engine.trial import TrialConfig


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for action in parser._actions:  # argparse keeps subparsers here; no public accessor
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise LookupError(name)


def _paragraphs(doc: str, starting: str) -> list[list[str]]:
    """Docstring paragraphs from the one that starts with `starting`, reflowed; a paragraph
    of "- " items becomes a list of items."""
    paras = doc.split("\n\n")
    first = next(i for i, p in enumerate(paras) if p.startswith(starting))
    out = []
    for para in paras[first:]:
        items = re.split(r"\n(?=- )", para)
        reflowed = [" ".join(line.strip() for line in item.splitlines()) for item in items]
        out.append([item.replace("``", "").removeprefix("- ") for item in reflowed])
    return out


def engine_constants() -> dict:
    search_cli = _subparser("search")
    cli_defaults = {a.dest: a.default for a in search_cli._actions}
    trial_defaults = {
        f.name: f.default
        for f in dataclasses.fields(TrialConfig)
        if f.default is not dataclasses.MISSING
    }
    tolerance_frac = inspect.signature(search.tolerance).parameters["frac"].default
    cap = cli_defaults["cap"]
    return {
        "ttft_percentiles": list(metrics.TTFT_PERCENTILES),
        "percentile_doc": _paragraphs(inspect.getdoc(metrics) or "", "Percentiles"),
        # the CLI's --warmup/--duration default to None and resolve per target: the figures
        # a real endpoint gets (a run's own settings are on its result page)
        "warmup_s": REAL_WARMUP_S,
        "duration_s": REAL_DURATION_S,
        "cap": cap,
        "max_trials": cli_defaults["max_trials"],
        "ramp": search.ramp_points(cap),
        "tolerance_pct": tolerance_frac * 100,
        "min_requests": trial_defaults["min_requests"],
        "max_loop_lag_ms": trial_defaults["max_loop_lag_ms"],
        "max_cpu_percent": trial_defaults["max_cpu_percent"],
        "flags": [
            (search.FLAG_NON_MONOTONE, "a pass above a fail at the same tier"),
            (search.FLAG_FAILED_CONFIRMATION, "the repeat of the highest pass failed"),
            (search.FLAG_CAPPED, "the tier still passed at the highest concurrency tried"),
            (search.FLAG_UNCONFIRMED, "the highest pass was not repeated"),
            (search.FLAG_BUDGET, "the search stopped at its trial budget"),
        ],
        "search_doc": _paragraphs(inspect.getdoc(search) or "", "Rules"),
        # cache truth's tolerance (docs/metrics.md "Cache truth")
        "cache_slack_tokens": cachetruth.SLACK_TOKENS_PER_REQUEST,
        "cache_slack_pct": cachetruth.SLACK_FRACTION * 100,
        "cache_flag_pct": cachetruth.FLAG_RATIO * 100,
        "cache_conservation_points": cachetruth.CONSERVATION_TOLERANCE * 100,
    }
