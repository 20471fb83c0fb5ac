"""`python runner/launchers/tiny_hf.py --out DIR --seed N`: the recipe of the tiny model the
vLLM examples serve on CPU (docs/engine.md "vLLM on CPU"), run with the vLLM environment's
Python (runner/launchers/vllm_env.py), which has torch, transformers and tokenizers.

A real architecture with random weights and a tokenizer trained here, so nothing is
downloaded and nothing is committed:

- the tokenizer: byte-level BPE with `VOCAB` entries, trained with `tokenizers` on this
  Python's own standard library sources (the first `CORPUS_FILES` modules by name), with a
  ChatML-style chat template that renders every role, tool calls as JSON;
- the model: a Llama (`LAYERS` layers, hidden `HIDDEN`, `HEADS` heads), weights drawn with
  `torch.manual_seed(seed)`, float32, positions up to `MAX_POSITIONS`, saved as safetensors.

It is sized so that vLLM on two CPU cores serves several agents of the small test set
(prompts up to ~2.5k tokens) at the lowest tier: a decode step costs well under a
millisecond of arithmetic, so the engine's own per-step overhead sets the speed.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

VOCAB = 2048
HIDDEN = 256
INTERMEDIATE = 512
LAYERS = 2
HEADS = 4
MAX_POSITIONS = 8192
CORPUS_FILES = 80
SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for part in m['content'] %}{{ part.get('text', '') }}"
    "{% endfor %}{% endif %}"
    "{% if m.get('tool_calls') %}{{ m['tool_calls'] | tojson }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus() -> list[str]:
    """The tokenizer's training text: this Python's standard library modules, by name."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [str(p) for p in sorted(stdlib.glob("*.py"))[:CORPUS_FILES]]


def build(out: Path, *, seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=SPECIAL[0],
        eos_token=SPECIAL[1],
        pad_token=SPECIAL[1],
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tiny_hf.py")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    build(args.out, seed=args.seed)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
