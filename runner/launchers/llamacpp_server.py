"""`python -m runner.launchers.llamacpp_server --model FILE --port P ...`: a llama.cpp
server (PyPI `xllamacpp`) on 127.0.0.1, for `process` launcher configs on CPU hosts.

It serves until SIGTERM/SIGINT. One KV slot per parallel sequence (not unified), so each
slot holds `--ctx-per-slot` tokens.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.launchers.llamacpp_server")
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--alias", default="tiny", help="served model name")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ctx-per-slot", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx_per_slot * args.parallel
    params.kv_unified = False
    params.cont_batching = True
    params.cache_prompt = True
    params.n_gpu_layers = 0
    params.warmup = False
    params.use_jinja = True
    params.endpoint_metrics = True
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.n_threads_http = max(2, args.parallel + 2)
    params.verbosity = 1
    params.sampling.seed = args.seed
    server = xllamacpp.Server(params)
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"llama.cpp serving {args.alias} on http://127.0.0.1:{args.port}", flush=True)
    while not stop:
        signal.pause()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
