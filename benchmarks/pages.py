"""The public pages as a reader meets them, in Debian's Chromium (issue 35, docs/benchmarks.md
"Pages in the browser").

Fills a throwaway embedded-profile site (`benchmarks.web_load`'s filler: SQLite and its cache
table in a temporary folder) with 30 published results, a model with simulated results only,
a simulated result with a band and the GB300 engine ladder, serves it with gunicorn, and for
every public page prints:

- the HTML's size (KB) and how many frontier-chart data blocks it carries;
- the page's width against the viewport at 1280 px and at 390 px (wider = overflow);
- at 1366×768, where the verdict strip and the frontier chart end (inside the first
  viewport or not);
- first contentful paint in Chromium (ms), the median of three loads;
- with `--axe`, the serious and critical axe-core violations; with `--lighthouse`,
  Lighthouse's performance and accessibility scores of the home, model, result and compare
  pages (both from npm: package.json, `make browser`).

    .venv/bin/python -m benchmarks.pages
    .venv/bin/python -m benchmarks.pages --shots DIR     # screenshots at both widths
    .venv/bin/python -m benchmarks.pages --axe --lighthouse
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.web_load import REPO, _env, _free_port, _gunicorn, _stop, _wait

CHROMIUM = "/usr/bin/chromium"
AXE = REPO / "node_modules" / "axe-core" / "axe.min.js"
LIGHTHOUSE = REPO / "node_modules" / ".bin" / "lighthouse"
LIGHTHOUSE_PAGES = ("home", "model", "result (measured)", "compare")
TINY_FIT = str(REPO / "tests" / "simulator" / "fit" / "tiny-fit.yaml")
LADDER = REPO / "docs" / "examples" / "ladder-gb300.json"
WIDTHS = {"laptop": (1280, 800), "phone": (390, 844)}
FOLD = (1366, 768)


def fill(folder: Path, results: int = 30) -> dict[str, str]:
    """The site's data, made through the publishing code (demo.synthetic); the pages to
    check by name."""
    env = _env(folder)
    os.environ.update({k: v for k, v in env.items() if k.startswith(("AGENTPERF", "DJANGO"))})
    for name in ("CACHE_REDIS_URL", "S3_ENDPOINT_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    call_command("createcachetable", verbosity=0)
    from demo.synthetic import (
        make_hardware,
        make_model,
        make_org,
        make_published_result,
        synthetic_points,
    )
    from ladders.services import ladder_import

    model = make_model(slug="bench-model", name="DeepSeek V4.1 Flash (bench)")
    twin_only = make_model(slug="twin-only", name="Vera model (simulated only)")
    systems = [make_hardware(name=f"System {name}") for name in ("H100 ×8", "B200 ×8", "MI355X")]
    org = make_org("Vendor")
    last = None
    for i in range(results - 2):
        last = make_published_result(
            model=model,
            hardware=systems[i % 3],
            org=org,
            label=f"{systems[i % 3].name} run {i}",
            points=synthetic_points(concurrencies=(1, 2, 4, 8, 16, 32, 64)),
        )
    band_points = [(1, 160.0, 2_000.0, 0.1), (2, 140.0, 6_000.0, 0.1), (4, 120.0, 12_000.0, 0.2),
                   (8, 70.0, 30_000.0, 0.3), (16, 40.0, 40_000.0, 0.5)]  # fmt: skip
    twin = make_published_result(
        model=model,
        hardware=systems[0],
        org=org,
        simulated=True,
        label="Twin with a band",
        points=band_points,
        config={"launcher": {"simulated": {"profile": TINY_FIT}}},
    )
    only = make_published_result(
        model=twin_only, hardware=systems[1], org=org, simulated=True, label="Twin only"
    )
    ladder = ladder_import(
        org=org, doc=json.loads(LADDER.read_text()), model=model, hardware=systems[1]
    )
    assert last is not None
    return {
        "home": "/",
        "models": "/models/",
        "model": f"/models/{model.slug}/",
        "model (simulated only)": f"/models/{twin_only.slug}/",
        "hardware list": "/hardware/",
        "hardware": f"/hardware/{systems[0].slug}/",
        "result (measured)": f"/results/{last.pk}/",
        "result (simulated, band)": f"/results/{twin.pk}/",
        "result (simulated only model)": f"/results/{only.pk}/",
        "compare": f"/compare/?r={last.pk}&r={twin.pk}&speed=100",
        "history": f"/history/{model.slug}/{systems[0].slug}/",
        "methodology": "/methodology/",
        "data": "/data/",
        "ladders": "/ladders/",
        "ladder": f"/ladders/{ladder.pk}/",
    }


def measure(page: Any, url: str) -> dict[str, Any]:
    page.goto(url, wait_until="load")
    page.wait_for_timeout(50)  # let Plotly's first draw settle (not a wait for an event)
    return page.evaluate(
        """() => {
            const box = s => { const e = document.querySelector(s);
                               if (!e) return null; const r = e.getBoundingClientRect();
                               return {top: r.top + scrollY, bottom: r.bottom + scrollY}; };
            const fcp = performance.getEntriesByName('first-contentful-paint')[0];
            // the outermost elements reaching past the viewport (what makes a page too wide)
            const wide = [];
            for (const e of document.querySelectorAll('body *')) {
                if (e.getBoundingClientRect().right <= innerWidth + 1) continue;
                if (e.closest('.scroll, .js-plotly-plot, .skip')) continue;
                if (wide.some(w => w.contains(e))) continue;
                wide.push(e);
            }
            return {width: document.documentElement.scrollWidth, viewport: innerWidth,
                    height: document.documentElement.scrollHeight,
                    verdict: box('#verdict'), chart: box('.plot'),
                    fcp: fcp ? fcp.startTime : null,
                    wide: wide.slice(0, 3).map(e => e.tagName.toLowerCase() +
                        (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined ?
                        '.' + String(e.className).split(' ')[0] : ''))};
        }"""
    )


def axe_violations(page: Any) -> list[str]:
    page.evaluate(AXE.read_text())  # evaluated, not a <script>: the site's CSP stays on
    found = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".filter(v => v.impact === 'serious' || v.impact === 'critical')"
        ".map(v => v.id + ' (' + v.nodes.length + ')')"
    )
    return list(found)


def lighthouse(url: str, folder: Path) -> dict[str, float]:
    """Lighthouse's performance and accessibility scores (0–100) of one page: desktop preset
    (its simulated throttling), Debian's Chromium headless."""
    out = folder / "lighthouse.json"
    out.unlink(missing_ok=True)
    for _ in range(3):  # Lighthouse's trace recording fails now and then (NO_NAVSTART)
        done = _lighthouse_once(url, out)
        if done.returncode == 0:
            break
    else:
        raise RuntimeError(f"lighthouse failed 3 times on {url}: {done.stderr[-500:]}")
    report = json.loads(out.read_text())
    return {
        name: round(100 * report["categories"][name]["score"])
        for name in ("performance", "accessibility")
    } | {
        "lcp ms": report["audits"]["largest-contentful-paint"]["numericValue"],
        "tbt ms": report["audits"]["total-blocking-time"]["numericValue"],
        "cls": report["audits"]["cumulative-layout-shift"]["numericValue"],
        "si ms": report["audits"]["speed-index"]["numericValue"],
        "fcp ms": report["audits"]["first-contentful-paint"]["numericValue"],
    }


def _lighthouse_once(url: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(LIGHTHOUSE),
            url,
            "--preset=desktop",
            "--only-categories=performance,accessibility",
            f"--chrome-path={CHROMIUM}",
            "--chrome-flags=--headless=new --no-sandbox",
            "--output=json",
            f"--output-path={out}",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md "Pages in the browser")."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=30)
    parser.add_argument("--shots", type=Path, help="save screenshots here")
    parser.add_argument("--axe", action="store_true", help="run axe-core on each page")
    parser.add_argument(
        "--lighthouse",
        action="store_true",
        help=f"Lighthouse scores of {', '.join(LIGHTHOUSE_PAGES)}",
    )
    parser.add_argument(
        "--site-dir",
        type=Path,
        default=REPO,
        help="serve the site from another checkout of the same schema (before/after: "
        "`git archive COMMIT | tar -x -C DIR`)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    return parser


def _viewport(
    browser: Any,
    url: str,
    name: str,
    label: str,
    size: tuple[int, int],
    args: argparse.Namespace,
    row: dict[str, Any],
) -> None:
    """Load the page at one viewport (three loads at the fold, for the median first paint)
    and add its figures to ``row``; a screenshot at the two widths with --shots."""
    w, h = size
    context = browser.new_context(viewport={"width": w, "height": h})
    page = context.new_page()
    got = [measure(page, url) for _ in range(3 if label == "fold" else 1)]
    m = got[-1]
    row[f"{label} width"] = m["width"]
    if label == "phone" and m["wide"]:
        row["too wide at 390"] = " ".join(m["wide"])
    if label == "fold":
        row["fcp ms"] = statistics.median(g["fcp"] or 0 for g in got)
        row["verdict end"] = (m["verdict"] or {}).get("bottom")
        row["chart top"] = (m["chart"] or {}).get("top")
        row["chart end"] = (m["chart"] or {}).get("bottom")
        row["height"] = m["height"]
        if args.axe:
            row["axe"] = ", ".join(axe_violations(page)) or "0"
    if args.shots and label in WIDTHS:
        args.shots.mkdir(parents=True, exist_ok=True)
        stem = name.replace(" ", "-").replace("(", "").replace(")", "")
        stem = stem.replace(",", "")
        page.screenshot(path=str(args.shots / f"{stem}-{w}.png"), full_page=True)
    context.close()


def _page_row(
    browser: Any, base: str, name: str, path: str, args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    """One page's row: its HTML's size and chart blocks, each viewport's figures, and
    Lighthouse's scores where asked."""
    with urllib.request.urlopen(base + path, timeout=60) as response:
        html = response.read()
    if args.shots:
        args.shots.mkdir(parents=True, exist_ok=True)
        (args.shots / (name.replace(" ", "-") + ".html")).write_bytes(html)
    row: dict[str, Any] = {
        "page": name,
        "kb": len(html) / 1024,
        "charts": html.count(b'type="application/json"'),
    }
    for label, size in {**WIDTHS, "fold": FOLD}.items():
        _viewport(browser, base + path, name, label, size, args, row)
    if args.lighthouse and name in LIGHTHOUSE_PAGES:
        scores = lighthouse(base + path, folder)
        row["lighthouse perf"] = scores["performance"]
        row["lighthouse a11y"] = scores["accessibility"]
        for metric in ("fcp ms", "lcp ms", "tbt ms", "si ms", "cls"):
            row[f"lighthouse {metric}"] = scores[metric]
    return row


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for wanted, path in ((args.axe, AXE), (args.lighthouse, LIGHTHOUSE)):
        if wanted and not path.exists():
            print(f"{path} is missing (make browser)", file=sys.stderr)
            return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="agentperf-pages-") as tmp:
        folder = Path(tmp)
        paths = fill(folder, args.results)
        port = _free_port()
        server = _gunicorn(
            "config.wsgi", port, args, _env(folder), folder / "site.log", args.site_dir
        )
        base = f"http://127.0.0.1:{port}"
        rows = []
        try:
            _wait(base + "/")
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless=new"])
                for name, path in paths.items():
                    rows.append(_page_row(browser, base, name, path, args, folder))
                browser.close()
        finally:
            _stop(server)
    print(table(rows))
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table, one column per figure any page has ("—": none)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c)
            cells.append("—" if v is None else f"{v:,.0f}" if isinstance(v, float) else str(v))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
