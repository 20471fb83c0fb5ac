"""A tiny llama-architecture GGUF model with a real tokenizer, for the ``process`` launcher's
CPU examples (``make demo`` serves one with llama.cpp) and for tests.

- ``fetch_vocab_gguf()``: the Qwen2 vocabulary GGUF shipped inside the llama-cpp-python sdist
  (``vendor/llama.cpp/models/ggml-vocab-qwen2.gguf``), downloaded once with pip and cached.
- ``build_tiny_gguf(path, seed=...)``: a small llama-architecture model (2 layers, hidden 64
  by default) with seeded random weights and that tokenizer; a different seed gives
  different weights, hence different greedy outputs.
- ``tiny_gguf(seed=...)``: the same, cached in the cache dir keyed by every parameter.

Cache directory: ``$AGENTPERF_CACHE`` or ``~/.cache/agentperf``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentperf.engine.datasets.aa_local import cache_dir
from agentperf.files import private_tmp, write_atomically

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
BUILDER_VERSION = 1  # bump when build_tiny_gguf changes what it writes


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
        write_atomically(target, src.read())
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
    write_atomically(cached, json.dumps(fields, ensure_ascii=False).encode())
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


def _write_metadata(
    writer: Any, params: TinyModelParams, name: str, n_vocab: int, fields: dict[str, Any]
) -> None:
    """The llama architecture's keys, then the tokenizer copied verbatim (tokens, types,
    merges, special ids, chat template)."""
    import gguf

    writer.add_name(name)
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
    for key, (vtype, sub_type, value) in fields.items():
        writer.add_key_value(
            key,
            value,
            gguf.GGUFValueType(vtype),
            sub_type=None if sub_type is None else gguf.GGUFValueType(sub_type),
        )


def _write_tensors(writer: Any, params: TinyModelParams, seed: int, n_vocab: int) -> None:
    """Seeded random weights, drawn in one fixed order (the same seed, the same file)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    kv_dim = params.n_embd // params.n_head * params.n_head_kv

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

    vocab_file = vocab_path or fetch_vocab_gguf(params.vocab)
    fields = tokenizer_fields(vocab_file)
    n_vocab = len(fields["tokenizer.ggml.tokens"][2])
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = private_tmp(out)
    writer = gguf.GGUFWriter(str(tmp), arch="llama")
    _write_metadata(
        writer, params, name or f"tiny-llama-{params.vocab}-seed{seed}", n_vocab, fields
    )
    _write_tensors(writer, params, seed, n_vocab)
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
