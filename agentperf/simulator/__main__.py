"""``python -m agentperf.simulator profiles|show|calibrate|band`` — the simulated serving
system's CLI (its real-time HTTP server is the pool host's: ``python -m runner.simulator``)."""

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
    cal.add_argument(
        "--concurrency", default=None, help="comma list (default: 1, 2, 4, 16, 64 … 12288)"
    )
    cal.add_argument("--warmup", type=float, default=60.0, help="virtual seconds")
    cal.add_argument("--duration", type=float, default=120.0, help="window, virtual seconds")
    cal.add_argument("--ramp", type=float, default=30.0, help="virtual seconds")
    cal.add_argument("--seed", type=int, default=0)
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
    band = sub.add_parser(
        "band",
        help="the frontier over the profile's open parameters and its fit's uncertainty "
        "(docs/simulator.md 'Bands')",
    )
    band.add_argument("--profile", required=True)
    band.add_argument("--at", default="", help="per-agent p25 speeds (tok/s), comma list")
    band.add_argument("--concurrency", default=None, help="comma list (default: the fit's)")
    band.add_argument("--warmup", type=float, default=None)
    band.add_argument("--duration", type=float, default=None)
    band.add_argument("--ramp", type=float, default=None)
    band.add_argument("--seed", type=int, default=0)
    band.add_argument("--catalog-dir", default=None)
    band.add_argument("--dataset", default=None)
    band.add_argument("--write", action="store_true", help="write <profile>.band.json")
    band.add_argument("--jobs", type=int, default=1, help="samples side by side")
    return ap


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "profiles":
            for name in available_profiles():
                print(name)
            return 0
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
    raise AssertionError(f"unhandled command {args.cmd!r}")


if __name__ == "__main__":
    sys.exit(main())
