"""Reference deployments: what a model's trusted deployment answers, recorded once by an
operator and compared with every run of that model (docs/verification.md "References").

    python -m runner.verification.reference record --base-url http://host:8000/v1 \\
        --model SERVED-NAME --slug MODEL-SLUG --precision bf16 \\
        --deployment "vLLM 0.x, BF16, 8x H200" [--out agentperf/verification/references/SLUG.json]

It records the greedy canary answers (`model_identity`) and, for each shipped text, the
reference's token ids and its top-k next-token distribution at every position
(`quality_distribution`). For the tiny test GGUF the reference is its F32 build; for a real
model, BF16 on a named engine. A model without a reference file is reported as "quality: no
reference", never as passing.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentperf.engine.transport import Clock, Transport
from agentperf.verification.fingerprint import (
    REFERENCES_DIR,
    collect_canaries,
    reference_document,
)
from agentperf.verification.quality import (
    MAX_POSITIONS,
    TOP_K,
    collect_distributions,
    reference_texts,
)
from agentperf.verification.taskcheck import collect_completions, load_problems
from runner.verification.taskrun import score


def tokenize(base_url: str, text: str, *, timeout_s: float = 30.0) -> list[int]:
    """Token ids of `text` from the server's `/tokenize` (llama.cpp: `content`, vLLM:
    `prompt`; both keys are sent), without special tokens."""
    root = base_url.rstrip("/").removesuffix("/v1")
    body = json.dumps({"content": text, "prompt": text, "add_special": False}).encode()
    request = urllib.request.Request(
        root + "/tokenize", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        data = json.loads(response.read())
    tokens = data.get("tokens") or []
    return [int(t["id"] if isinstance(t, dict) else t) for t in tokens]


def record_reference(
    *, base_url: str, model: str, slug: str, precision: str, deployment: str, tasks: int = 0
) -> dict[str, Any]:
    """The reference document of `slug` from the deployment at `base_url`."""
    from agentperf.engine.jobs import Target, run_on_target

    texts = [
        {"id": tid, "tokens": tokenize(base_url, text)[: MAX_POSITIONS + 1]}
        for tid, text in reference_texts().items()
    ]
    skeleton = {"distributions": {"texts": texts}}

    problems = load_problems(tasks) if tasks else []

    async def main(transport: Transport, clock: Clock) -> dict[str, Any]:
        canaries = await collect_canaries(transport, clock, model=model)
        dists = await collect_distributions(transport, clock, model=model, reference=skeleton)
        completions = await collect_completions(
            transport, clock, model=model, problems=problems, tag="reference"
        )
        return {"canaries": canaries, "distributions": dists, "completions": completions}

    collected = run_on_target(Target(base_url=base_url), main)
    failed = [c["id"] for c in collected["canaries"]["canaries"] if not c["ok"]]
    broken = [t["id"] for t in collected["distributions"]["texts"] if t["error"]]
    if failed or broken:
        raise RuntimeError(f"the reference deployment failed: canaries {failed}, texts {broken}")
    doc = reference_document(
        model_slug=slug, deployment=deployment, collected=collected["canaries"]
    )
    doc["precision"] = precision
    by_id = {t["id"]: t for t in collected["distributions"]["texts"]}
    doc["distributions"] = {
        "top_k": TOP_K,
        "texts": [{**t, "positions": by_id[t["id"]]["positions"]} for t in texts],
    }
    if problems:
        scored = score(problems, collected["completions"])
        doc["tasks"] = {
            "suite": scored["suite"],
            "problems": scored["problems"],
            "passed": scored["passed"],
            "pass_at_1": scored["pass_at_1"],
            "outcomes": [
                {"task_id": o["task_id"], "passed": o["passed"]} for o in scored["outcomes"]
            ],
        }
    return doc


def _record(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.verification.reference record")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="served model name")
    ap.add_argument("--slug", required=True, help="catalog slug the reference is for")
    ap.add_argument("--precision", required=True, help="weight precision, e.g. bf16, gguf_f32")
    ap.add_argument("--deployment", default="", help="what served it (engine, version, GPU)")
    ap.add_argument(
        "--tasks", type=int, default=0, help="HumanEval problems to score (0: none; 164: all)"
    )
    ap.add_argument("--out", default="", help="default: references/<slug>.json")
    args = ap.parse_args(argv)
    doc = record_reference(
        base_url=args.base_url,
        model=args.model,
        slug=args.slug,
        precision=args.precision,
        deployment=args.deployment or args.base_url,
        tasks=args.tasks,
    )
    out = Path(args.out) if args.out else REFERENCES_DIR / f"{args.slug}.json"
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    positions = sum(len(t["positions"]) for t in doc["distributions"]["texts"])
    print(f"wrote {out}: {len(doc['canaries'])} canaries, {positions} positions (top-{TOP_K})")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["record"]:
        print("usage: python -m runner.verification.reference record --help", file=sys.stderr)
        sys.exit(2)
    sys.exit(_record(sys.argv[2:]))
