"""`agentperf` commands (docs/api.md "Vendor CLI").

Exit codes: 0 ok; 1 the run failed or was rejected/withdrawn (or a download did not match
its sha256, or a receipt does not verify); 2 bad input, an API refusal (4xx, with the field paths) or no answer from the
API; 130 interrupted (Ctrl-C stops following, never the run).
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from agentperf_cli import __version__
from agentperf_cli import verify as verify_cmd
from agentperf_cli.client import Api, ApiError, Unreachable
from agentperf_cli.offline import content_type_for, validate_text
from agentperf_cli.settings import (
    CliError,
    Target,
    config_path,
    normalize_url,
    resolve,
    write_config,
)

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
# Submission states (submissions/constants.py) where following ends.
DONE_OK = ("in_review", "published")
DONE_BAD = (
    "failed",
    "rejected",
    "withdrawn",
    "invalid",
    "changes_requested",
    "superseded",
    "invalidated",
)
KEY_PREFIX = "agentperf-cli-sha256-"
DEFAULT_INTERVAL_S = 10.0  # 360 polls/hour, within THROTTLE_VENDOR's default 600/hour
RETRIES = 5  # consecutive unanswered polls before following gives up
DOWNLOAD_CHUNK = 1 << 20


def _console(stderr: bool = False) -> Console:
    # Server text is never read as rich markup; a pipe gets wide lines, not wrapped paths.
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    return Console(stderr=stderr, markup=False, highlight=False, emoji=False, width=width)


out = _console()
err = _console(stderr=True)


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")  # exact JSON, never rich-rendered
    sys.stdout.flush()


def _print_fields(head: str, fields: dict[str, list[str]]) -> None:
    err.print(head, style="bold red", soft_wrap=True)
    for path, messages in fields.items():
        for message in messages:
            err.print(f"  {path}: {message}", soft_wrap=True)


def _print_api_error(exc: ApiError) -> None:
    _print_fields(f"error: {exc.status} {exc.code}: {exc.api_message}", exc.fields)


def _read_config_file(path: str) -> tuple[bytes, str]:
    file = Path(path)
    try:
        return file.read_bytes(), content_type_for(file)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


# --- login ---------------------------------------------------------------------------------


def cmd_login(args: argparse.Namespace) -> int:
    target = resolve(args.url)
    token = args.token
    if token is None:
        if sys.stdin.isatty():
            token = getpass.getpass("API token (not echoed): ")
        else:
            token = sys.stdin.readline()
    token = token.strip()
    if not token:
        raise CliError("no token given: pass --token, or type it at the prompt")
    url = normalize_url(args.url) if args.url else target.url
    api = Api(Target(url=url, token=token))
    if not args.no_verify:
        api.get("datasets/")  # any vendor endpoint: a bad token is a 401 here
    path = write_config(url, token)
    out.print(f"logged in to {url}; token saved to {path} (mode 0600)", soft_wrap=True)
    return EXIT_OK


# --- validate ------------------------------------------------------------------------------

# docs/api.md "A config is public"
PUBLIC_NOTE = (
    "A config is public: once its result is published, every string in it is on the result "
    "page, the public API and the data dump. Pass a credential by name only, {secret: NAME} "
    "(the runner host supplies NAME's value); a clear credential is refused, naming its field"
)


def _suspicious(config: Any) -> list[dict[str, Any]]:
    """The strings the secret detector rated suspicious (below the refusal threshold)."""
    from agentperf.schema.secrets import suspicious_strings

    return [
        {"path": row["path"], "rules": row["rules"]}
        for row in suspicious_strings(config.model_dump(mode="json"))
    ]


def cmd_validate(args: argparse.Namespace) -> int:
    text, content_type = _read_config_file(args.config)
    error, config = validate_text(text, content_type)
    if error is not None:
        if args.json:
            _print_json(error)
        else:
            body = error["error"]
            _print_fields(f"{args.config}: {body['code']}: {body['message']}", body["fields"])
        return EXIT_INPUT
    suspicious = _suspicious(config)
    if args.json:
        dumped = config.model_dump(mode="json")
        _print_json({"valid": True, "config": dumped, "public": True, "suspicious": suspicious})
        return EXIT_OK
    launcher = config.launcher.kind
    out.print(
        f"{args.config}: valid (schema_version {config.schema_version}): {config.model.id} on "
        f"{config.hardware}, {config.accelerators_used} accelerator(s), {launcher} launcher"
        + (" (simulated)" if config.is_simulated else ""),
        soft_wrap=True,
    )
    out.print(
        "the catalog (model.id, the hardware, an attached endpoint's allowlist) is checked "
        "by the server on submit",
        style="dim",
        soft_wrap=True,
    )
    out.print(PUBLIC_NOTE, soft_wrap=True)
    for row in suspicious:
        out.print(
            f"  suspicious: {row['path']} ({'; '.join(row['rules'])}): a reviewer will see it "
            "highlighted; if it is a credential, pass it as {secret: NAME}",
            soft_wrap=True,
        )
    return EXIT_OK


# --- progress rendering --------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


def _ttft(trial: dict[str, Any] | None) -> float | None:
    metrics = (trial or {}).get("metrics") or {}
    ttft = metrics.get("ttft_s") or {}
    value = ttft.get("p75", ttft.get("p50")) if isinstance(ttft, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def progress_text(progress: dict[str, Any], trials: Sequence[dict[str, Any]] = ()) -> str:
    """One line from a run's `progress` (runs/progress.py) and, when given, its trials."""
    phase = progress.get("phase") or "starting"
    if phase == "queued":
        text = (
            f"queued on {progress.get('queue')}: position {progress.get('queue_position')} "
            f"({progress.get('runs_ahead')} ahead)"
        )
        estimate = progress.get("estimated_start_s")
        if estimate is None:
            return text + ", no start estimate yet (no finished run on this queue)"
        return text + f", estimated start in {_duration(float(estimate))}"
    parts = [f"phase {phase}"]
    search = progress.get("search_phase")
    if search and search != phase:
        parts[0] += f" ({search})"
    if progress.get("trial") is not None:
        parts.append(f"trial {progress['trial']} of {progress.get('max_trials')}")
    if progress.get("concurrency") is not None:
        parts.append(f"N={progress['concurrency']}")
    last = progress.get("last_trial") or {}
    if last:
        bits = [f"last trial N={last.get('concurrency')}"]
        p25 = last.get("p25_output_speed")
        if isinstance(p25, (int, float)):
            bits.append(f"p25 {p25:.1f} tok/s")
        trial = next((t for t in trials if t.get("index") == last.get("index")), None)
        ttft = _ttft(trial)
        if ttft is not None:
            bits.append(f"TTFT p75 {ttft:.3f} s")
        parts.append(" ".join(bits))
    elif progress.get("trials_done") is not None:
        parts.append(f"{progress['trials_done']} trial(s) done")
    return " · ".join(parts)


def status_line(submission: dict[str, Any], run: dict[str, Any] | None = None) -> str:
    latest = submission.get("latest_run")
    head = f"#{submission['id']} {submission['status']}"
    if not latest:
        return f"{head} · no run yet"
    progress = (run or latest).get("progress") or {}
    trials = (run or {}).get("trials") or []
    return f"{head} · run #{latest['id']} {latest['status']} · {progress_text(progress, trials)}"


def follow(api: Api, submission_id: int, interval: float) -> int:
    """Poll until the submission is in review (0) or failed/decided against (1).

    One request per poll (the submission carries its latest run's progress), plus one for
    the run's trials each time a trial ends (the last trial's TTFT): the vendor throttle
    (THROTTLE_VENDOR, 600/hour by default) counts every call. A 429 waits its Retry-After
    and goes on; the run is never touched."""
    live = Live(Text(""), console=out, auto_refresh=False) if out.is_terminal else None
    last_line, last_status, misses = "", "", 0
    run: dict[str, Any] | None = None
    try:
        if live is not None:
            live.start()
        while True:
            try:
                submission = api.get(f"submissions/{submission_id}/")
                latest = submission.get("latest_run") or {}
                ended = ((latest.get("progress") or {}).get("last_trial") or {}).get("index")
                if latest.get("status") != "running":
                    run = None
                elif ended is not None and (
                    run is None or run.get("id") != latest["id"] or _trials_seen(run) != ended
                ):
                    run = api.get(f"runs/{latest['id']}/")  # its trials, for the last TTFT
                if run is not None:
                    run = {**run, "progress": latest.get("progress")}
                misses = 0
            except Unreachable as exc:
                misses += 1
                if misses >= RETRIES:
                    raise
                err.print(f"{exc.message}; retrying", soft_wrap=True)
                time.sleep(interval)
                continue
            except ApiError as exc:
                if exc.status != 429:
                    raise
                wait = max(interval, exc.retry_after or 60.0)
                err.print(
                    f"throttled by the API; following again in {_duration(wait)}", soft_wrap=True
                )
                time.sleep(wait)
                continue
            line = status_line(submission, run)
            status = str(submission["status"])
            if live is not None:
                if status != last_status:
                    live.console.print(line)
                live.update(Text(line), refresh=True)
            elif line != last_line:
                out.print(line, soft_wrap=True)
            last_line, last_status = line, status
            if status in DONE_OK:
                return EXIT_OK
            if status in DONE_BAD:
                reason = submission.get("status_reason") or ""
                err.print(
                    f"submission #{submission_id} is {status}" + (f": {reason}" if reason else ""),
                    style="bold red",
                    soft_wrap=True,
                )
                return EXIT_FAILED
            time.sleep(interval)
    except KeyboardInterrupt:
        if live is not None:
            live.stop()
            live = None
        err.print(
            f"stopped following submission #{submission_id}; it keeps running. "
            f"Resume with: agentperf status {submission_id} --follow",
            soft_wrap=True,
        )
        return EXIT_INTERRUPTED
    finally:
        if live is not None:
            live.stop()


def _trials_seen(run: dict[str, Any]) -> int | None:
    indexes = [t.get("index") for t in run.get("trials") or [] if isinstance(t.get("index"), int)]
    return max(indexes) if indexes else None


# --- submit / status / withdraw / report ---------------------------------------------------


def idempotency_key(text: bytes) -> str:
    """Derived from the file's bytes, so running the same command again is a replay."""
    return KEY_PREFIX + hashlib.sha256(text).hexdigest()


def cmd_submit(args: argparse.Namespace) -> int:
    text, content_type = _read_config_file(args.config)
    api = Api(resolve(args.url))
    key = args.idempotency_key or idempotency_key(text)
    try:
        body, headers = api.request(
            "POST",
            "submissions/",
            body=text,
            content_type=content_type or "application/yaml",
            headers={"Idempotency-Key": key},
        )
    except KeyboardInterrupt:
        err.print(
            "interrupted; running the same command again is a replay, never a second submission",
            soft_wrap=True,
        )
        return EXIT_INTERRUPTED
    sid = int(body["id"])
    if headers.get("idempotent-replayed") == "true":
        out.print(
            f"submission #{sid} {body['status']} (replayed: this file was already "
            "submitted; --idempotency-key KEY submits it again)",
            soft_wrap=True,
        )
    else:
        out.print(f"submission #{sid} {body['status']}", soft_wrap=True)
    if not args.follow:
        out.print(f"follow it with: agentperf status {sid} --follow", style="dim", soft_wrap=True)
        return EXIT_OK
    return follow(api, sid, args.interval)


def _kv_table(rows: Sequence[tuple[str, str]]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(Text(key), Text(value))
    return table


def _result_text(result: dict[str, Any] | None) -> str:
    if not result:
        return "not published"
    return f"{result.get('label')} ({result.get('status')}): {result.get('url')}"


def cmd_status(args: argparse.Namespace) -> int:
    api = Api(resolve(args.url))
    if args.id is None:
        if args.follow:
            raise CliError("--follow needs a submission id: agentperf status ID --follow")
        path = "submissions/" + (f"?status={args.status}" if args.status else "")
        listed = api.get(path)
        if args.json:
            _print_json(listed)
            return EXIT_OK
        table = Table("id", "status", "model", "hardware", "run", "progress", "result")
        for sub in listed:
            latest = sub.get("latest_run") or {}
            table.add_row(
                Text(str(sub["id"])),
                Text(str(sub["status"])),
                Text(str(sub.get("model"))),
                Text(str(sub.get("hardware"))),
                Text(f"#{latest['id']} {latest['status']}" if latest else "-"),
                Text(progress_text(latest.get("progress") or {}) if latest else "-"),
                Text((sub.get("result") or {}).get("url") or "-"),
            )
        out.print(table if listed else Text("no submissions"))
        return EXIT_OK
    submission = api.get(f"submissions/{args.id}/")
    if args.follow:
        return follow(api, int(args.id), args.interval)
    if args.json:
        _print_json(submission)
        return EXIT_OK
    latest = submission.get("latest_run")
    rows = [
        ("submission", f"#{submission['id']}"),
        ("status", str(submission["status"])),
        ("reason", str(submission.get("status_reason") or "-")),
        ("model", str(submission.get("model"))),
        ("hardware", str(submission.get("hardware"))),
        ("simulated", "yes" if submission.get("is_simulated") else "no"),
        ("created", str(submission.get("created_at"))),
        ("latest run", status_line(submission).split(" · ", 1)[1] if latest else "no run yet"),
        ("result", _result_text(submission.get("result"))),
    ]
    out.print(_kv_table(rows))
    return EXIT_OK


def cmd_withdraw(args: argparse.Namespace) -> int:
    api = Api(resolve(args.url))
    body = api.post_json(f"submissions/{args.id}/withdraw/", {"reason": args.reason or ""})
    out.print(f"submission #{body['id']} {body['status']}", soft_wrap=True)
    return EXIT_OK


def _metric(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "-"


def verdict_text(verdicts: dict[str, Any]) -> str:
    """A trial's verdicts as the vendor API gives them (one TierVerdict document per tier:
    docs/pipeline.md "The contract"): "tier:pass tier:fail"."""
    return " ".join(f"{k}:{'pass' if v['passed'] else 'fail'}" for k, v in verdicts.items())


def cmd_report(args: argparse.Namespace) -> int:
    api = Api(resolve(args.url))
    submission = api.get(f"submissions/{args.id}/")
    runs = api.get(f"submissions/{args.id}/runs/")
    run = runs[0] if runs else None
    verification = None
    if run is not None:
        try:
            verification = api.get(f"runs/{run['id']}/verification/")
        except ApiError as exc:
            if exc.code != "not_ready":
                raise
    if args.json:
        doc = {"submission": submission, "run": run, "verification": verification}
        _print_json(doc)
        return EXIT_OK
    out.print(
        f"submission #{submission['id']} {submission['status']} · {submission.get('model')}"
        f" on {submission.get('hardware')}",
        style="bold",
        soft_wrap=True,
    )
    if run is None:
        out.print("no run yet", soft_wrap=True)
        return EXIT_OK
    progress = run.get("progress") or {}
    out.print(
        f"run #{run['id']} {run['status']} (attempt {run.get('attempt')}): "
        f"{progress_text(progress, run.get('trials') or [])}",
        soft_wrap=True,
    )
    if run.get("error"):
        out.print(f"error: {run['error']}", style="red", soft_wrap=True)
    max_agents = (run.get("search_summary") or {}).get("max_agents") or {}
    if max_agents:
        tiers = Table("tier", "max agents", title="Result")
        for tier, value in max_agents.items():
            tiers.add_row(Text(str(tier)), Text(str(value)))
        out.print(tiers)
    trials = run.get("trials") or []
    if trials:
        table = Table("trial", "N", "phase", "p25 tok/s", "TTFT p75 s", "verdicts", title="Trials")
        for trial in trials:
            metrics = trial.get("metrics") or {}
            verdicts = trial.get("verdicts") or {}
            table.add_row(
                Text(str(trial.get("index"))),
                Text(str(trial.get("concurrency"))),
                Text(str(trial.get("phase"))),
                Text(_metric(metrics.get("p25_output_speed"), ".1f")),
                Text(_metric(_ttft(trial), ".3f")),
                Text(verdict_text(verdicts)),
            )
        out.print(table)
    if verification is None:
        out.print("verification: no report yet", soft_wrap=True)
    else:
        checks = Table(
            "check", "status", "summary", title=f"Verification: {verification['status']}"
        )
        for check in verification.get("checks") or []:
            checks.add_row(
                Text(str(check.get("name"))),
                Text(str(check.get("status"))),
                Text(str(check.get("summary") or "")),
            )
        out.print(checks)
    out.print(f"result: {_result_text(submission.get('result'))}", soft_wrap=True)
    return EXIT_OK


# --- datasets ------------------------------------------------------------------------------


def cmd_datasets_list(args: argparse.Namespace) -> int:
    listed = Api(resolve(args.url)).get("datasets/")
    if args.json:
        _print_json(listed)
        return EXIT_OK
    table = Table("id", "name", "version", "size", "sha256 (canonical)")
    for ds in listed:
        table.add_row(*(Text(str(ds.get(k))) for k in ("id", "name", "version", "size", "sha256")))
    out.print(table if listed else Text("no public datasets"))
    return EXIT_OK


def cmd_datasets_download(args: argparse.Namespace) -> int:
    api = Api(resolve(args.url))
    dataset_id = args.id
    if dataset_id is None:
        listed = api.get("datasets/")
        if len(listed) != 1:
            names = ", ".join(f"{d['id']} ({d['name']})" for d in listed) or "none"
            raise CliError(f"give a dataset id; public datasets: {names}")
        dataset_id = int(listed[0]["id"])
    link = api.get(f"datasets/{dataset_id}/download/")
    name = Path(str(link.get("name") or f"dataset-{dataset_id}")).name
    target = Path(args.output) if args.output else Path.cwd() / name
    if target.is_dir():
        target = target / name
    expected = str(link.get("sha256") or "").lower()
    partial = target.with_name(f".{target.name}.partial")
    digest = hashlib.sha256()
    size = 0
    try:
        request = urllib.request.Request(str(link["url"]), headers={"User-Agent": "agentperf"})
        with urllib.request.urlopen(request, timeout=60) as response, partial.open("wb") as fh:
            while chunk := response.read(DOWNLOAD_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                fh.write(chunk)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise CliError(f"download of dataset {dataset_id} failed: {reason}") from None
    except KeyboardInterrupt:
        partial.unlink(missing_ok=True)
        raise
    actual = digest.hexdigest()
    if not expected:
        partial.unlink(missing_ok=True)
        raise CliError(
            f"the API gave no sha256 for dataset {dataset_id}; nothing kept", exit_code=1
        )
    if actual != expected:
        partial.unlink(missing_ok=True)
        err.print(
            f"sha256 mismatch for dataset {dataset_id}: got {actual}, the API says "
            f"{expected}; nothing kept",
            style="bold red",
            soft_wrap=True,
        )
        return EXIT_FAILED
    os.replace(partial, target)
    out.print(f"wrote {target} ({size} bytes, sha256 {actual} ok)", soft_wrap=True)
    return EXIT_OK


# --- argument parsing ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="API base URL (else AGENTPERF_URL, else the login file)")
    parser = argparse.ArgumentParser(
        prog="agentperf",
        description="AgentPerf vendor CLI: submit deployment configs and follow their runs. "
        + PUBLIC_NOTE
        + ".",
        epilog="exit codes: 0 ok, 1 run failed/rejected/withdrawn (or a bad download), "
        "2 bad input or API refusal, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"agentperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("login", parents=[common], help="store the API URL and a token")
    p.add_argument("--token", help="the API token (else prompted, never echoed)")
    p.add_argument("--no-verify", action="store_true", help="store without calling the API")
    p.set_defaults(func=cmd_login)

    p = sub.add_parser(
        "validate",
        help="check a config offline (the API's own schema and secret detector)",
        description=f"Check a config offline. {PUBLIC_NOTE}.",
    )
    p.add_argument("config", help="YAML or JSON deployment config")
    p.add_argument("--json", action="store_true", help="the API's error body as JSON")
    p.set_defaults(func=cmd_validate)

    def interval(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--interval",
            type=float,
            default=DEFAULT_INTERVAL_S,
            help=f"poll every S seconds (default {DEFAULT_INTERVAL_S:g}; the API throttles calls)",
        )

    p = sub.add_parser(
        "submit",
        parents=[common],
        help="submit a config (public once published)",
        description=f"Submit a config. {PUBLIC_NOTE}.",
    )
    p.add_argument("config", help="YAML or JSON deployment config")
    p.add_argument("--follow", action="store_true", help="follow the run until review")
    p.add_argument("--idempotency-key", help="default: derived from the file's sha256")
    interval(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", parents=[common], help="your submissions, or one of them")
    p.add_argument("id", nargs="?", type=int, help="a submission id")
    p.add_argument("--follow", action="store_true", help="follow the run until review")
    p.add_argument("--status", help="list only submissions in this state")
    p.add_argument("--json", action="store_true", help="the API's JSON")
    interval(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("withdraw", parents=[common], help="withdraw a submission")
    p.add_argument("id", type=int, help="a submission id")
    p.add_argument("--reason", help="recorded with the withdrawal")
    p.set_defaults(func=cmd_withdraw)

    p = sub.add_parser("report", parents=[common], help="a submission's run, verification, result")
    p.add_argument("id", type=int, help="a submission id")
    p.add_argument("--json", action="store_true", help="the API's JSON")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("datasets", help="public datasets (the tuning subset)")
    dsub = p.add_subparsers(dest="datasets_command", required=True, metavar="COMMAND")
    d = dsub.add_parser("list", parents=[common], help="list public datasets")
    d.add_argument("--json", action="store_true", help="the API's JSON")
    d.set_defaults(func=cmd_datasets_list)
    d = dsub.add_parser("download", parents=[common], help="download one, checking its sha256")
    d.add_argument("id", nargs="?", type=int, help="dataset id (optional when there is one)")
    d.add_argument("-o", "--output", help="file or folder (default: ./<name>)")
    d.set_defaults(func=cmd_datasets_download)

    p = verify_cmd.add_parser(sub, common)
    p.set_defaults(func=lambda args: verify_cmd.cmd_verify(args, out, err))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except ApiError as exc:
        _print_api_error(exc)
        return exc.exit_code
    except CliError as exc:
        err.print(f"error: {exc.message}", style="bold red", soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted", soft_wrap=True)
        return EXIT_INTERRUPTED


__all__ = ["build_parser", "config_path", "main"]
