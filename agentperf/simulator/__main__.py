"""``python -m agentperf.simulator profiles|show|calibrate|band|holdout|accuracy`` — the
system's CLI (its real-time HTTP server is the pool host's: ``python -m runner.twin_server``)."""

from __future__ import annotations

import argparse
import json
import sys

from agentperf.simulator.profile import Profile, ProfileError, available_profiles, load_profile


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m agentperf.simulator")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("profiles", help="list the bundled profiles")
    sh = sub.add_parser("show", help="print a profile's resolved parameters and sources")
    sh.add_argument("--profile", required=True)
    sh.add_argument("--catalog-dir", default=None)
    _add_calibrate(sub)
    _add_band(sub)
    _add_holdout(sub)
    sub.add_parser(
        "accuracy",
        help="every profile against its held-out figures: errors, MAPE, admitted or "
        "quarantined (from the committed records)",
    )
    return ap


def _add_sweep_arguments(cmd: argparse.ArgumentParser, concurrency_default: str) -> None:
    """The engine trials' flags a sweep command shares: concurrencies, virtual seconds."""
    cmd.add_argument("--concurrency", default=None, help=f"comma list ({concurrency_default})")
    cmd.add_argument("--warmup", type=float, default=60.0, help="virtual seconds")
    cmd.add_argument("--duration", type=float, default=120.0, help="window, virtual seconds")
    cmd.add_argument("--ramp", type=float, default=30.0, help="virtual seconds")
    cmd.add_argument("--seed", type=int, default=0)


def _add_calibrate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cal = sub.add_parser(
        "calibrate",
        help="engine trials on virtual time along a concurrency sweep: frontier at speeds, "
        "single/two-agent speed, %% error to published points",
    )
    cal.add_argument("--profile", required=True)
    cal.add_argument("--catalog-dir", default=None)
    cal.add_argument("--at", default="220,82", help="per-agent p25 speeds (tok/s), comma list")
    cal.add_argument("--points", default=None, help="published points (YAML/JSON) to compare")
    cal.add_argument(
        "--dataset",
        default=None,
        help="dataset file (default: the synthetic set, seed 1, 200 trajectories, stdlib text)",
    )
    _add_sweep_arguments(cal, "default: 1, 2, 4, 16, 64 … 12288")
    cal.add_argument(
        "--full", action="store_true", help="run every concurrency (no stop below the slowest)"
    )
    cal.add_argument(
        "--fit",
        action="store_true",
        help="fit the profile's free parameters (its fit section) to its points file by "
        "bounded least squares on log error (docs/simulator.md 'Calibration: the fit')",
    )
    cal.add_argument("--jobs", type=int, default=1, help="--fit: evaluations side by side")
    cal.add_argument(
        "--loo", choices=("linearised", "refit"), default="linearised", help="--fit: LOO method"
    )
    cal.add_argument(
        "--write", action="store_true", help="--fit: write the record next to the profile"
    )
    cal.add_argument(
        "--check",
        action="store_true",
        help="--fit: exit 1 unless the fit reproduces the committed record and the profile's values",
    )


def _add_band(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    band = sub.add_parser(
        "band",
        help="the frontier over the profile's open parameters and its fit's uncertainty "
        "(docs/simulator.md 'Bands')",
    )
    band.add_argument("--profile", required=True)
    band.add_argument("--at", default="", help="per-agent p25 speeds (tok/s), comma list")
    band.add_argument("--concurrency", default=None, help="comma list (default: the fit's)")
    # None: the fit's trial (or the calibrate defaults)
    band.add_argument("--warmup", type=float, default=None)
    band.add_argument("--duration", type=float, default=None)
    band.add_argument("--ramp", type=float, default=None)
    band.add_argument("--seed", type=int, default=0)
    band.add_argument("--catalog-dir", default=None)
    band.add_argument("--dataset", default=None)
    band.add_argument("--write", action="store_true", help="write <profile>.band.json")
    band.add_argument("--jobs", type=int, default=1, help="samples side by side")


def _add_holdout(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ho = sub.add_parser(
        "holdout",
        help="the profile's predictions at published figures it was never fitted to "
        "(docs/simulator.md 'Accuracy'); --write keeps them as <profile>.holdout.json",
    )
    ho.add_argument("--profile", required=True)
    ho.add_argument("--points", required=True, help="published points (YAML/JSON or a name)")
    _add_sweep_arguments(ho, "default: 1, 2, 4 … 12288")
    ho.add_argument("--catalog-dir", default=None)
    ho.add_argument("--dataset", default=None)
    ho.add_argument("--write", action="store_true", help="write <profile>.holdout.json")


def _band(args: argparse.Namespace) -> int:
    from agentperf.simulator import bands
    from agentperf.simulator import fit as fitmod

    try:
        doc, path = fitmod.load_document(args.profile)
        trials = (doc.get("fit") or {}).get("trials") or {}
        conc = (
            [int(x) for x in args.concurrency.split(",") if x.strip()]
            if args.concurrency
            else [int(x) for x in trials.get("concurrency") or []]
        )
        if not conc:
            raise ValueError("--concurrency: required (the profile has no fit trials)")
        at = [float(x) for x in args.at.split(",") if x.strip()]
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def pick(flag: float | None, key: str, default: float) -> float:
        return flag if flag is not None else float(trials.get(key, default))

    try:
        band = bands.compute_band(
            path,
            _trajectories(args.dataset),
            concurrencies=conc,
            warmup_s=pick(args.warmup, "warmup_s", 60.0),
            duration_s=pick(args.duration, "duration_s", 120.0),
            ramp_s=pick(args.ramp, "ramp_s", 30.0),
            seed=args.seed,
            speeds=at,
            jobs=max(1, args.jobs),
            log=lambda line: print(line, flush=True),
        )
    except (ProfileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(bands.format_band(band))
    if args.write:
        out = bands.band_path(path)
        out.write_text(json.dumps(band, indent=1, ensure_ascii=False) + "\n")
        print(f"band written: {out}")
    return 0


def _trajectories(dataset: str | None) -> list:  # type: ignore[type-arg]
    if dataset:
        from agentperf.engine.trajectory import load_dataset

        return list(load_dataset(dataset).trajectories)
    from agentperf.engine.datasets.corpus import build_corpus
    from agentperf.engine.datasets.synthetic import generate_dataset
    from agentperf.engine.tokens import TokenCounter

    counter = TokenCounter()
    corpus = build_corpus(counter, discover=False)
    return list(
        generate_dataset(seed=1, trajectories=200, corpus=corpus, counter=counter).trajectories
    )


def _fit(args: argparse.Namespace) -> int:
    import json as _json

    from agentperf.simulator import fit as fitmod

    try:
        doc, path = fitmod.load_document(args.profile)
        fitmod.parse_fit(doc)
    except (fitmod.FitError, ProfileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        record = fitmod.run_fit(
            path,
            _trajectories(args.dataset),
            jobs=max(1, args.jobs),
            loo=args.loo,
            log=lambda line: print(line, flush=True),
        )
    except (fitmod.FitError, ProfileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(fitmod.format_record(record))
    if args.write:
        out = fitmod.write_record(path, record)
        fitmod.write_profile_values(path, record)
        print(f"record written: {out}; fitted values written into {path}")
    if args.check:
        committed_path = fitmod.record_path(path)
        if not committed_path.is_file():
            print(f"check: no committed record {committed_path}", file=sys.stderr)
            return 1
        committed = _json.loads(committed_path.read_text())
        problems = fitmod.compare_records(committed, record) + fitmod.profile_mismatches(
            doc, record
        )
        for line in problems:
            print(f"check: {line}", file=sys.stderr)
        if problems:
            return 1
        print("check: the fit reproduces the committed record and the profile's values")
    return 0


def _calibrate(args: argparse.Namespace, profile: Profile) -> int:
    from agentperf.simulator import calibrate as cal

    try:
        at = [float(x) for x in args.at.split(",") if x.strip()]
        sweep = (
            [int(x) for x in args.concurrency.split(",") if x.strip()]
            if args.concurrency
            else list(cal.DEFAULT_SWEEP)
        )
        published = cal.load_points(args.points) if args.points else None
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if published:
        at = sorted({*at, *published["frontier"]}, reverse=True)
    if args.dataset:
        from agentperf.engine.trajectory import load_dataset

        trajectories = load_dataset(args.dataset).trajectories
    else:
        from agentperf.engine.datasets.corpus import build_corpus
        from agentperf.engine.datasets.synthetic import generate_dataset
        from agentperf.engine.tokens import TokenCounter

        counter = TokenCounter()
        corpus = build_corpus(counter, discover=False)
        trajectories = generate_dataset(
            seed=1, trajectories=200, corpus=corpus, counter=counter
        ).trajectories

    def on_point(p: cal.SweepPoint) -> None:
        print(
            f"trial N={p.concurrency}: p25 {p.p25_speed:.1f} tok/s, TTFT p75 "
            f"{p.ttft_p75_s:.3f} s, {p.throughput_per_accelerator:,.0f} tok/s per accelerator",
            flush=True,
        )

    points = cal.run_sweep(
        profile,
        trajectories,
        concurrencies=sweep,
        stop_below=None if args.full or not at else min(at),
        on_point=on_point,
        warmup_s=args.warmup,
        duration_s=args.duration,
        ramp_s=args.ramp,
        seed=args.seed,
    )
    print(cal.report(profile, points, at=at, published=published))
    return 0


def _holdout(args: argparse.Namespace, profile: Profile) -> int:
    from agentperf.simulator import calibrate as cal
    from agentperf.simulator.accuracy import ProfileAccuracy, holdout_path
    from agentperf.simulator.fit import FitError, parse_fit, points_file
    from agentperf.simulator.profile import profile_document

    try:
        path = points_file(args.points)
        published = cal.load_points(path)
        sweep = (
            [int(x) for x in args.concurrency.split(",") if x.strip()]
            if args.concurrency
            else list(cal.DEFAULT_SWEEP)
        )
    except (ValueError, OSError, FitError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    doc = profile_document(args.profile)
    if isinstance(doc.get("fit"), dict):
        fitted_to = parse_fit(doc).points_path.resolve()
        if fitted_to == path.resolve():
            print(
                f"error: --points: {profile.name} is fitted to {path.name}; its figures are "
                "not held out (its leave-one-out errors are, in its .fit.json)",
                file=sys.stderr,
            )
            return 2
    speeds = list(published["frontier"])
    points = cal.run_sweep(
        profile,
        _trajectories(args.dataset),
        concurrencies=sweep,
        stop_below=min(speeds) if speeds else None,
        on_point=lambda p: print(
            f"trial N={p.concurrency}: p25 {p.p25_speed:.1f} tok/s, "
            f"{p.throughput_per_accelerator:,.0f} tok/s per accelerator",
            flush=True,
        ),
        warmup_s=args.warmup,
        duration_s=args.duration,
        ramp_s=args.ramp,
        seed=args.seed,
    )
    figures = cal.held_out_figures(points, published)
    verdict = ProfileAccuracy(profile=profile.name, figures=tuple(figures), sources=())
    for f in figures:
        err = "never reached" if f.error is None else f"{f.error:+.1%}"
        print(f"{f.figure}: twin {f.simulated} against {f.reference:g} {f.unit}: {err}")
    print(f"{verdict.status}: {verdict.reason}")
    if args.write:
        record = {
            "profile": profile.name,
            "command": "python -m agentperf.simulator holdout "
            + " ".join(a for a in sys.argv[1:] if a != "--write"),
            "points_file": path.name,
            "points_source": published.get("source", ""),
            "trials": {
                "concurrency": [p.concurrency for p in points],
                "warmup_s": args.warmup,
                "duration_s": args.duration,
                "ramp_s": args.ramp,
                "seed": args.seed,
                "dataset": args.dataset or "synthetic seed 1, 200 trajectories",
            },
            "sweep": [
                {
                    "concurrency": p.concurrency,
                    "p25_speed": round(p.p25_speed, 2),
                    "throughput_per_accelerator": round(p.throughput_per_accelerator, 1),
                }
                for p in points
            ],
            "figures": [f.model_dump() for f in figures],
        }
        out = holdout_path(profile.name)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


def _accuracy() -> int:
    from agentperf.simulator.accuracy import accuracy_table

    for acc in accuracy_table():
        mape = "—" if acc.mape is None else f"{acc.mape:.1%}"
        print(f"{acc.profile}: {acc.status} (MAPE {mape}; {acc.reason})")
        for f in acc.figures:
            err = "never reached" if f.error is None else f"{f.error:+.1%}"
            print(f"  {f.figure} [{f.basis}]: {f.simulated} vs {f.reference:g} {f.unit} {err}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "profiles":
            for name in available_profiles():
                print(name)
            return 0
        if args.cmd == "accuracy":
            return _accuracy()
        profile = load_profile(args.profile, catalog_dir=args.catalog_dir)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "show":
        from agentperf.simulator.calibrate import describe

        print(json.dumps(describe(profile), indent=2))
        return 0
    if args.cmd == "calibrate":
        return _fit(args) if args.fit else _calibrate(args, profile)
    if args.cmd == "band":
        return _band(args)
    if args.cmd == "holdout":
        return _holdout(args, profile)
    raise AssertionError(f"unhandled command {args.cmd!r}")


if __name__ == "__main__":
    sys.exit(main())
