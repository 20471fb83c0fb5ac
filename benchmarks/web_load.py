"""Requests per second of the public site under load, beside a bare WSGI app on the same
server (docs/benchmarks.md "Web under load", docs/caching.md).

Fills a throwaway embedded-profile site (SQLite and its cache table in a temporary folder,
the catalog seeded, `--results` results published through `result_publish`), then starts,
under the same gunicorn flags (`--workers`, `--threads`):

- a bare WSGI app answering a fixed 5.5 KB body (`bare_app` below): the ceiling;
- the site (`config.wsgi`), its pages and API answers warmed into the shared cache;
- Varnish with the repository's VCL (deploy/varnish/agentperf.vcl) in front of the site;

and drives each path with `wrk` (`-t1 -c<connections> -d<seconds>s --latency`): direct,
through Varnish, and a 304 revalidation (If-None-Match with the answer's ETag), printing
req/s, p50 and p99 and the share of the bare app's req/s.

    .venv/bin/python -m benchmarks.web_load                # 4 s per row, 32 connections
    .venv/bin/python -m benchmarks.web_load --seconds 2 --results 40
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BODY = b"<!doctype html><title>bare</title>" + b"x" * (5632 - 35)


def bare_app(environ, start_response):  # type: ignore[no-untyped-def]
    """The ceiling: a WSGI app that answers a fixed body and nothing else."""
    start_response(
        "200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(BODY)))]
    )
    return [BODY]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {seconds} s")


def _env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("CACHE_REDIS_URL", "S3_ENDPOINT_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        env.pop(name, None)
    env["AGENTPERF_VAR_DIR"] = str(folder / "var")
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    return env


def _fill(folder: Path, results: int) -> dict[str, str]:
    """The embedded profile's database, migrated, seeded and with `results` results of the
    demo's first model on three systems; returns the paths to load."""
    env = _env(folder)
    os.environ.update({k: v for k, v in env.items() if k.startswith(("AGENTPERF", "DJANGO"))})
    for name in ("CACHE_REDIS_URL", "S3_ENDPOINT_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    call_command("createcachetable", verbosity=0)
    from demo.synthetic import make_hardware, make_model, make_org, make_published_result

    model = make_model(slug="bench-model", name="Bench model")
    systems = [make_hardware(name=f"System {i}") for i in range(3)]
    org = make_org("Vendor")
    last = None
    for i in range(results):
        last = make_published_result(
            model=model, hardware=systems[i % 3], org=org, label=f"System {i % 3} run {i}"
        )
    assert last is not None
    return {
        "/": "/",
        "model page": f"/models/{model.slug}/",
        "result page": f"/results/{last.pk}/",
        "model API": f"/api/v1/public/models/{model.slug}/",
        "result API": f"/api/v1/public/results/{last.pk}/",
    }


def _gunicorn(
    app: str, port: int, args: argparse.Namespace, env: dict, log: Path, cwd: Path = REPO
):
    cmd = [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        "-b",
        f"127.0.0.1:{port}",
        "-w",
        str(args.workers),
        "--threads",
        str(args.threads),
        "--log-level",
        "warning",
    ]
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _varnish(folder: Path, backend_port: int) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    vcl = (REPO / "deploy/varnish/agentperf.vcl").read_text()
    (folder / "bench.vcl").write_text(vcl.replace('.port = "8000";', f'.port = "{backend_port}";'))
    cmd = [
        shutil.which("varnishd") or "/usr/sbin/varnishd",
        "-F", "-j", "none", "-n", str(folder / "varnish"), "-a", f"127.0.0.1:{port}",
        "-T", "none", "-f", str(folder / "bench.vcl"), "-s", "malloc,256m",
    ]  # fmt: skip
    process = subprocess.Popen(
        cmd,
        stdout=open(folder / "varnishd.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, port


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _ms(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if found is None:
        raise RuntimeError(f"wrk latency {text!r}")
    return float(found.group(1)) * _UNITS[found.group(2)]


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(group: int) -> float:
    """User + system CPU seconds of every process in a process group (the server's)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def wrk(
    url: str,
    args: argparse.Namespace,
    headers: dict[str, str] | None = None,
    server: subprocess.Popen | None = None,
) -> dict:
    cmd = ["wrk", "-t1", f"-c{args.connections}", f"-d{args.seconds}s", "--latency"]
    for name, value in (headers or {}).items():
        cmd += ["-H", f"{name}: {value}"]
    cpu0 = cpu_seconds(server.pid) if server else 0.0
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(server.pid) - cpu0 if server else 0.0
    if "Latency Distribution" not in out or "Requests/sec" not in out:
        raise RuntimeError(f"wrk answered no figures for {url}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"(?m)^\s+50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"(?m)^\s+99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return {"rps": rps, "cpu_us": cpu / max(done, 1) * 1e6, "p50": p50, "p99": p99, "bad": int(non2xx.group(1)) if non2xx else 0,
            "errors": errors.group(0) if errors else ""}  # fmt: skip


def _head(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], int]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), len(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), len(exc.read())


Row = tuple[str, dict, str]


@dataclass
class Servers:
    """The servers under load: the bare app, the site and (unless --no-varnish) Varnish in
    front of it, each a base URL and its process."""

    bare: str
    site: str
    proxy: str | None
    bare_server: subprocess.Popen
    site_server: subprocess.Popen
    varnish_server: subprocess.Popen | None


def _parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md "Web under load")."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=4, help="per row")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--results", type=int, default=30)
    parser.add_argument("--no-varnish", action="store_true")
    parser.add_argument(
        "--site-dir",
        type=Path,
        default=REPO,
        help="serve the site from another checkout of the same schema (a before/after "
        "comparison: `git archive COMMIT | tar -x -C DIR`)",
    )
    return parser


def _start_servers(
    args: argparse.Namespace, folder: Path, processes: list[subprocess.Popen]
) -> Servers:
    """Start the bare app, the site and Varnish, each process added to ``processes`` as it
    starts (the caller stops them), and wait until each answers."""
    env = _env(folder)
    bare_port, site_port = _free_port(), _free_port()
    processes.append(
        _gunicorn("benchmarks.web_load:bare_app", bare_port, args, env, folder / "b.log")
    )
    processes.append(
        _gunicorn("config.wsgi", site_port, args, env, folder / "s.log", args.site_dir)
    )
    bare, site = f"http://127.0.0.1:{bare_port}", f"http://127.0.0.1:{site_port}"
    proxy = None
    if not args.no_varnish:
        process, port = _varnish(folder, site_port)
        processes.append(process)
        proxy = f"http://127.0.0.1:{port}"
    for base in [bare, site] + ([proxy] if proxy else []):
        _wait(base + "/")
    return Servers(bare, site, proxy, processes[0], processes[1], processes[2] if proxy else None)


def _path_rows(name: str, path: str, servers: Servers, args: argparse.Namespace) -> list[Row]:
    """One path's rows: direct (warmed first), a 304 revalidation with its ETag, and
    through Varnish."""
    site, proxy = servers.site, servers.proxy
    code, headers, size = _head(site + path, {"Accept": "application/json"})
    assert code == 200, (path, code)
    etag = headers.get("ETag", '"none"')  # none before HTTP caching
    for _ in range(3):  # warm every worker process's memo
        _head(site + path, {"Accept": "application/json"})
    kb = f"{size / 1024:.0f} KB"
    json_accept = {"Accept": "application/json"}
    rows: list[Row] = [
        (f"{name} {path} ({kb})", wrk(site + path, args, json_accept, servers.site_server), "")
    ]
    revalidate = {**json_accept, "If-None-Match": etag}
    rows.append(("  same, 304", wrk(site + path, args, revalidate, servers.site_server), ""))
    if proxy:
        _head(proxy + path, json_accept)
        rows.append(
            ("  through Varnish", wrk(proxy + path, args, json_accept, servers.varnish_server), "")
        )
    return rows


def _print_rows(rows: list[Row]) -> None:
    """Each row beside the bare app (the first row): req/s and the server's CPU per request.

    req/s depends on what else the machine runs; the server's own CPU time per request much
    less (its share of the bare app's is the ceiling on a quiet box)."""
    base_rps, base_cpu = rows[0][1]["rps"], rows[0][1]["cpu_us"]
    print(
        f"{'path':52} {'req/s':>7} {'of bare':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'CPU us/req':>10} {'bare/it':>7}"
    )
    for name, r, _ in rows:
        note = f" {r['bad']} non-2xx/3xx" if r["bad"] else ""
        print(
            f"{name:52} {r['rps']:7.0f} {r['rps'] / base_rps:7.0%} "
            f"{r['p50']:7.1f} {r['p99']:7.1f} {r['cpu_us']:10.0f} "
            f"{base_cpu / max(r['cpu_us'], 1e-9):7.0%}{note}"
        )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not shutil.which("wrk"):
        print("wrk is not installed (make varnish)", file=sys.stderr)
        return 2
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="agentperf-web-load-") as tmp:
        folder = Path(tmp)
        try:
            paths = _fill(folder, args.results)
            servers = _start_servers(args, folder, processes)
            print(
                f"gunicorn -w {args.workers} --threads {args.threads}; wrk -t1 "
                f"-c{args.connections} -d{args.seconds}s; {os.cpu_count()} CPUs, load "
                f"{os.getloadavg()[0]:.1f}; {args.results} results (SQLite, database cache)\n"
            )
            bare_row = wrk(servers.bare + "/", args, server=servers.bare_server)
            rows: list[Row] = [("bare WSGI app (5.5 KB)", bare_row, "")]
            for name, path in paths.items():
                rows += _path_rows(name, path, servers, args)
            _print_rows(rows)
        finally:
            for process in reversed(processes):
                _stop(process)
    return 0


if __name__ == "__main__":
    sys.exit(main())
