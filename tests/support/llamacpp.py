"""A real llama.cpp server for tests: a tiny GGUF model with a real tokenizer, served by
PyPI ``xllamacpp`` in a subprocess.

- ``fetch_vocab_gguf()``: the Qwen2 vocabulary GGUF shipped inside the llama-cpp-python sdist
  (``vendor/llama.cpp/models/ggml-vocab-qwen2.gguf``), downloaded once with pip and cached.
- ``build_tiny_gguf(path, seed=...)``: a small llama-architecture model (2 layers, hidden 64
  by default) with seeded random weights and that tokenizer; a different seed gives
  different weights, hence different greedy outputs.
- ``tiny_gguf(seed=...)``: the same, cached in the cache dir keyed by every parameter.
- ``start_llama_server(model, ...)``: an OpenAI-compatible server on 127.0.0.1 (free port),
  one thread, in its own process so a test can kill it mid-stream; ``stop()`` ends it by PID.

Cache directory: ``$AGENTPERF_CACHE`` or ``~/.cache/agentperf``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.engine.datasets.aa_local import cache_dir

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
BUILDER_VERSION = 1  # bump when build_tiny_gguf changes what it writes
REPO_ROOT = Path(__file__).resolve().parents[2]


def fetch_vocab_gguf(name: str = "qwen2", directory: Path | None = None) -> Path:
    """``ggml-vocab-<name>.gguf`` from the llama-cpp-python sdist, cached."""
    root = directory or cache_dir()
    target = root / "vocab" / f"ggml-vocab-{name}.gguf"
    if target.exists():
        return target
    sdist_dir = root / "sdist"
    sdists = sorted(sdist_dir.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"))
    if not sdists:
        sdist_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
                str(sdist_dir),
            ],
            check=True,
        )
        sdists = sorted(sdist_dir.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"))
    member = (
        f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/models/"
        f"ggml-vocab-{name}.gguf"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdists[0], "r:gz") as tar:
        src = tar.extractfile(member)
        if src is None:
            raise FileNotFoundError(member)
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(src.read())
        os.replace(tmp, target)
    return target


def tokenizer_fields(vocab_file: Path) -> dict[str, tuple[int, int | None, Any]]:
    """The ``tokenizer.*`` key/values of a GGUF as (type, array item type, value).

    gguf's reader takes ~15 s on a 150k-token vocabulary, so the result is cached as JSON
    beside the vocabulary file.
    """
    cached = vocab_file.with_suffix(".tokenizer.json")
    if cached.exists() and cached.stat().st_mtime >= vocab_file.stat().st_mtime:
        return {k: (v[0], v[1], v[2]) for k, v in json.loads(cached.read_text()).items()}
    import gguf

    reader = gguf.GGUFReader(str(vocab_file))
    fields: dict[str, tuple[int, int | None, Any]] = {}
    for key, fld in reader.fields.items():
        if key.startswith("tokenizer."):
            vtype = int(fld.types[0])
            sub_type = int(fld.types[1]) if fld.types[0] == gguf.GGUFValueType.ARRAY else None
            fields[key] = (vtype, sub_type, fld.contents())
    tmp = cached.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields, ensure_ascii=False))
    os.replace(tmp, cached)
    return fields


@dataclass(frozen=True, slots=True)
class TinyModelParams:
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    context_length: int = 32768
    vocab: str = "qwen2"
    # layer weights as written: "f32", or quantized by the gguf package ("q8_0", "q4_0"),
    # the same seeded values, so the builds differ only by their precision
    weights: str = "f32"


def build_tiny_gguf(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    params: TinyModelParams = TinyModelParams(),
    vocab_path: Path | None = None,
    name: str | None = None,
) -> Path:
    """Write a tiny llama-architecture GGUF with seeded random weights and a real tokenizer."""
    import gguf
    import numpy as np

    vocab_file = vocab_path or fetch_vocab_gguf(params.vocab)
    fields = tokenizer_fields(vocab_file)
    n_vocab = len(fields["tokenizer.ggml.tokens"][2])
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")

    writer = gguf.GGUFWriter(str(tmp), arch="llama")
    writer.add_name(name or f"tiny-llama-{params.vocab}-seed{seed}")
    writer.add_context_length(params.context_length)
    writer.add_embedding_length(params.n_embd)
    writer.add_block_count(params.n_layer)
    writer.add_feed_forward_length(params.n_ff)
    writer.add_head_count(params.n_head)
    writer.add_head_count_kv(params.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(params.n_embd // params.n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # Copy the tokenizer verbatim (tokens, types, merges, special ids, chat template).
    for key, (vtype, sub_type, value) in fields.items():
        writer.add_key_value(
            key,
            value,
            gguf.GGUFValueType(vtype),
            sub_type=None if sub_type is None else gguf.GGUFValueType(sub_type),
        )

    rng = np.random.default_rng(seed)
    head_dim = params.n_embd // params.n_head
    kv_dim = head_dim * params.n_head_kv

    def weight(*shape: int, scale: float = 0.5) -> Any:
        # numpy shape is (rows=out, cols=in); GGUF stores the reverse order.
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
    if params.weights not in ("f32", *qtype):
        raise ValueError(f"weights {params.weights!r}: f32, q8_0 or q4_0")

    def layer(name: str, values: Any) -> None:
        """A layer matrix in the build's precision (same values before quantization)."""
        if params.weights == "f32":
            writer.add_tensor(name, values)
            return
        kind = qtype[params.weights]
        writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)

    # Embeddings dominate the size (vocab x hidden), so they are stored as f16.
    writer.add_tensor(
        "token_embd.weight", weight(n_vocab, params.n_embd, scale=8.0).astype(np.float16)
    )
    writer.add_tensor("output_norm.weight", np.ones(params.n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, params.n_embd, scale=8.0).astype(np.float16))
    for i in range(params.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(params.n_embd, dtype=np.float32))
        layer(f"blk.{i}.attn_q.weight", weight(params.n_embd, params.n_embd))
        layer(f"blk.{i}.attn_k.weight", weight(kv_dim, params.n_embd))
        layer(f"blk.{i}.attn_v.weight", weight(kv_dim, params.n_embd))
        layer(f"blk.{i}.attn_output.weight", weight(params.n_embd, params.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(params.n_embd, dtype=np.float32))
        layer(f"blk.{i}.ffn_gate.weight", weight(params.n_ff, params.n_embd))
        layer(f"blk.{i}.ffn_up.weight", weight(params.n_ff, params.n_embd))
        layer(f"blk.{i}.ffn_down.weight", weight(params.n_embd, params.n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def tiny_gguf(
    *, seed: int = 0, params: TinyModelParams = TinyModelParams(), directory: Path | None = None
) -> Path:
    """``build_tiny_gguf`` output, cached by builder version, seed and every parameter."""
    key = json.dumps(
        {
            "builder": BUILDER_VERSION,
            "seed": seed,
            **{f: getattr(params, f) for f in params.__slots__},
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    target = (directory or cache_dir()) / "models" / f"tiny-llama-{params.vocab}-{digest}.gguf"
    if not target.exists():
        build_tiny_gguf(target, seed=seed, params=params)
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(slots=True)
class LlamaServer:
    """A running llama.cpp server process."""

    process: subprocess.Popen[bytes]
    port: int
    model_path: Path
    alias: str
    n_parallel: int
    ctx_per_slot: int
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would (for mid-stream failure tests)."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def start_llama_server(
    model: Path,
    *,
    n_parallel: int = 1,
    ctx_per_slot: int = 4096,
    n_threads: int = 1,
    alias: str = "tiny",
    log_dir: Path | None = None,
    startup_timeout_s: float = 180.0,
) -> LlamaServer:
    """Start ``xllamacpp`` serving ``model`` on a free loopback port; wait for /v1/models.

    The KV cache is split per slot (not unified), so each of the ``n_parallel`` slots holds
    ``ctx_per_slot`` tokens and a longer prompt is refused with HTTP 400.
    """
    port = free_port()
    log_dir = log_dir or (cache_dir() / "logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"llama-server-{port}.log"
    config = {
        "model": str(model),
        "port": port,
        "n_parallel": n_parallel,
        "n_ctx": ctx_per_slot * n_parallel,
        "n_threads": n_threads,
        "alias": alias,
    }
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.llamacpp", json.dumps(config)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LlamaServer(process, port, model, alias, n_parallel, ctx_per_slot, log_path)
    deadline = time.monotonic() + startup_timeout_s
    while True:
        if not server.alive():
            raise RuntimeError(f"llama.cpp server exited at startup:\n{server.log()[-4000:]}")
        try:
            with urllib.request.urlopen(server.base_url + "/v1/models", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"llama.cpp server not ready after {startup_timeout_s}s")
        time.sleep(0.1)


def _serve(config: dict[str, Any]) -> None:
    """Child process: build the params, start the server, wait for a signal."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = config["model"]
    params.model_alias = {config["alias"]}
    params.hostnames = ["127.0.0.1"]
    params.port = config["port"]
    params.n_parallel = config["n_parallel"]
    params.n_ctx = config["n_ctx"]
    params.kv_unified = False
    params.cont_batching = True
    params.cache_prompt = True
    params.n_gpu_layers = 0
    params.warmup = False
    params.use_jinja = True
    params.endpoint_metrics = True
    params.cpuparams.n_threads = config["n_threads"]
    params.cpuparams_batch.n_threads = config["n_threads"]
    params.n_threads_http = max(2, config["n_parallel"] + 2)
    params.verbosity = 1
    params.sampling.seed = 1234
    server = xllamacpp.Server(params)
    stop = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while not stop:
        signal.pause()
    del server


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
