"""Model identity: greedy outputs on fixed canary prompts against the model's reference
deployment (docs/verification.md "model_identity").

The worker asks each canary with temperature 0, a fixed output length (``ignore_eos``) and,
where the server gives them, the top-k log-probabilities of every output token. The web
side compares the answers with the reference recorded from the model's reference
deployment (``references/<model-slug>.json``; simulated runs compare with
``references/simulated.json``, the honest simulator). An exact match passes. Where both
sides have log-probabilities, a divergence is accepted as numerical noise only when, at
the first differing token, each side's token is among the other side's top-k (a near tie
that another kernel or batch size can flip); any other divergence fails.

Record a reference from a deployment you trust::

    python -m agentperf.verification.fingerprint record --base-url http://host:8000/v1 \\
        --model served-name --slug model-slug --out agentperf/verification/references/SLUG.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentperf.engine.transport import Clock, Exchange, RequestSpec, Transport

REFERENCES_DIR = Path(__file__).resolve().parent / "references"
SIMULATED_REFERENCE = "simulated"
CANARY_MAX_TOKENS = 16
TOP_K = 5
CANARIES: tuple[tuple[str, str], ...] = (
    ("py-reverse", "Write a Python function that reverses a linked list."),
    ("sql-join", "Explain the difference between an inner join and a left join."),
    ("bash-find", "Give a shell command that finds every file larger than 1 GB."),
    ("rust-borrow", "Why does the Rust borrow checker reject two mutable references?"),
    ("git-rebase", "When should I rebase instead of merge?"),
    ("regex-email", "Write a regular expression that matches an e-mail address."),
)


def canary_spec(model: str, cid: str, prompt: str, *, logprobs: bool = True) -> RequestSpec:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": CANARY_MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = TOP_K
    return RequestSpec(
        request_id=f"canary-{cid}",
        api="chat",
        body=body,
        target_output_tokens=CANARY_MAX_TOKENS,
        timeout_s=120.0,
    )


def tokens_of(ex: Exchange) -> tuple[list[str], list[list[str]]] | None:
    """(output tokens, top-k tokens at each position) from a stream's logprobs, if sent."""
    chunks = ex.extra.get("logprobs")
    if not chunks:
        return None
    tokens: list[str] = []
    tops: list[list[str]] = []
    for chunk in chunks:
        for item in (chunk or {}).get("content") or []:
            if not isinstance(item, dict) or "token" not in item:
                continue
            tokens.append(str(item["token"]))
            tops.append([str(t.get("token")) for t in item.get("top_logprobs") or []])
    return (tokens, tops) if tokens else None


async def collect_canaries(transport: Transport, clock: Clock, *, model: str) -> dict[str, Any]:
    """Ask every canary; the probe's evidence: {"canaries": [{"id", "output", "tokens",
    "top", "ok", "error"}], "logprobs": bool}."""
    out = []
    logprobs = True
    for cid, prompt in CANARIES:
        ex = await transport.send(canary_spec(model, cid, prompt, logprobs=logprobs))
        if not ex.ok and logprobs and ex.http_status == 400:
            logprobs = False  # a server that refuses logprobs: compare the text alone
            ex = await transport.send(canary_spec(model, cid, prompt, logprobs=False))
        item: dict[str, Any] = {"id": cid, "ok": ex.ok, "output": ex.content}
        if not ex.ok:
            item["error"] = f"{ex.error_class}: {ex.error_detail[:200]}"
        toks = tokens_of(ex)
        if toks is not None:
            item["tokens"], item["top"] = toks
        out.append(item)
    return {"canaries": out, "logprobs": any("tokens" in c for c in out)}


def reference_path(model_slug: str, *, simulated: bool) -> Path:
    return REFERENCES_DIR / f"{SIMULATED_REFERENCE if simulated else model_slug}.json"


def load_reference(model_slug: str, *, simulated: bool) -> dict[str, Any] | None:
    path = reference_path(model_slug, simulated=simulated)
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    data.setdefault("source", str(path.relative_to(REFERENCES_DIR.parent.parent.parent)))
    return data


def compare_canary(candidate: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """One canary: {"id", "match": "exact"|"near_tie"|"diverged"|"missing", "detail"}."""
    cid = reference.get("id")
    if not candidate or not candidate.get("ok", True):
        return {"id": cid, "match": "missing", "detail": (candidate or {}).get("error", "")}
    got, want = str(candidate.get("output", "")), str(reference.get("output", ""))
    if got == want:
        return {"id": cid, "match": "exact", "detail": ""}
    c_tokens, r_tokens = candidate.get("tokens"), reference.get("tokens")
    c_top, r_top = candidate.get("top"), reference.get("top")
    result: dict[str, Any] = {"id": cid, "expected": want[:200], "got": got[:200]}
    if not (c_tokens and r_tokens and c_top and r_top):
        return {**result, "match": "diverged", "detail": "outputs differ (no logprobs to judge)"}
    i = next(
        (k for k, (a, b) in enumerate(zip(c_tokens, r_tokens, strict=False)) if a != b),
        min(len(c_tokens), len(r_tokens)),
    )
    if i >= min(len(c_tokens), len(r_tokens)) or i >= min(len(c_top), len(r_top)):
        return {**result, "match": "diverged", "detail": f"outputs differ in length at {i}"}
    ours, theirs = c_tokens[i], r_tokens[i]
    near = theirs in c_top[i] and ours in r_top[i]
    detail = f"first divergence at token {i}: {ours!r} vs reference {theirs!r}; " + (
        "each is in the other's top-k (near tie)" if near else "not a near tie"
    )
    return {**result, "match": "near_tie" if near else "diverged", "detail": detail, "at": i}


def compare_canaries(
    collected: dict[str, Any] | None, reference: dict[str, Any]
) -> list[dict[str, Any]]:
    by_id = {c.get("id"): c for c in (collected or {}).get("canaries") or []}
    return [compare_canary(by_id.get(r.get("id"), {}), r) for r in reference.get("canaries") or []]


def reference_document(
    *, model_slug: str, deployment: str, collected: dict[str, Any]
) -> dict[str, Any]:
    return {
        "model": model_slug,
        "deployment": deployment,
        "params": {"max_tokens": CANARY_MAX_TOKENS, "temperature": 0, "top_logprobs": TOP_K},
        "canaries": [
            {k: v for k, v in c.items() if k in ("id", "output", "tokens", "top")}
            for c in collected["canaries"]
        ],
    }


def _record(argv: Sequence[str]) -> int:
    from agentperf.engine.jobs import Target, run_on_target

    ap = argparse.ArgumentParser(prog="python -m agentperf.verification.fingerprint record")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="served model name")
    ap.add_argument("--slug", required=True, help="catalog slug the reference is for")
    ap.add_argument("--deployment", default="", help="what served it (engine, version, GPU)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    async def main(transport: Transport, clock: Clock) -> dict[str, Any]:
        return await collect_canaries(transport, clock, model=args.model)

    collected = run_on_target(Target(base_url=args.base_url), main)
    failed = [c["id"] for c in collected["canaries"] if not c["ok"]]
    if failed:
        print(f"canaries failed: {failed}", file=sys.stderr)
        return 1
    doc = reference_document(
        model_slug=args.slug, deployment=args.deployment or args.base_url, collected=collected
    )
    Path(args.out).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {len(doc['canaries'])} canaries, logprobs={collected['logprobs']}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["record"]:
        print("usage: python -m agentperf.verification.fingerprint record --help", file=sys.stderr)
        sys.exit(2)
    sys.exit(_record(sys.argv[2:]))
