"""What quantized weights cost in quality: perplexity and greedy agreement vs float32.

For each ``--quantization`` the engine is built with those weights ("auto", the default, runs
the embedded GGUF's own Q4_1 blocks; "none" its float32 conversion) and measured on:

- **perplexity** of a fixed text (standard-library module docstrings, ``--tokens`` tokens)
  under teacher forcing: one forward pass of agentrt's own model over the whole text (torch
  reference attention on a fresh paged KV), the log-probability of every next token;
- **greedy agreement** with the float32 engine on chat prompts: how many of the generated
  tokens match before the first difference, and how many outputs are identical.

    python benchmarks/quant_quality.py                      # none, auto, int8, int4
    python benchmarks/quant_quality.py --tokens 1024 --max-tokens 64
"""

from __future__ import annotations

import argparse
import importlib
import math

import torch

from agentrt import EngineConfig, LLMEngine, SamplingParams
from agentrt.attention.base import AttentionMetadata
from agentrt.attention.torch_ref import TorchRefBackend
from agentrt.core.kv_tensors import KVCacheTensors

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "List three prime numbers.", "Who wrote Hamlet?", "Explain photosynthesis briefly.",
           "Give me a tip for learning Python.", "What is 12 times 7?",
           "Describe a cat in one sentence."]
_TEXT_MODULES = ("argparse", "json", "heapq", "doctest", "typing")


def text_ids(tokenizer, n: int) -> list[int]:
    text = "\n\n".join(importlib.import_module(m).__doc__ or "" for m in _TEXT_MODULES)
    return tokenizer.encode(text, add_special_tokens=False)[:n]


@torch.inference_mode()
def perplexity(core: LLMEngine, ids: list[int]) -> float:
    """exp(mean NLL of ids[1:]) from one teacher-forced forward pass over ``ids``."""
    model, c, page = core.model, core.model_config, 16
    pages = -(-len(ids) // page)
    kv = KVCacheTensors.allocate(c.num_layers, pages, page, c.num_kv_heads, c.head_dim,
                                 core.dtype)
    backend = TorchRefBackend(kv, c.num_heads, c.head_dim)
    i32 = torch.int32
    backend.plan(AttentionMetadata(
        qo_indptr=torch.tensor([0, len(ids)], dtype=i32),
        kv_indptr=torch.tensor([0, pages], dtype=i32),
        kv_indices=torch.arange(pages, dtype=i32),
        kv_last_page_len=torch.tensor([len(ids) - (pages - 1) * page], dtype=i32),
        slot_mapping=torch.arange(len(ids), dtype=torch.int64), page_size=page))
    previous, model.attn = model.attn, backend
    try:
        hidden = model.forward(torch.tensor(ids), torch.arange(len(ids)))
        logits = model.logits(hidden[:-1])
    finally:
        model.attn = previous
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]))
    return math.exp(float(nll))


def greedy(core: LLMEngine, max_tokens: int) -> list[list[int]]:
    prompts = [core.tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                                  add_generation_prompt=True, tokenize=False)
               for p in PROMPTS]
    params = SamplingParams(max_tokens=max_tokens)
    reqs = [core.add_request(p, params) for p in prompts]
    while core.has_unfinished():
        core.step()
    return [list(r.output_token_ids) for r in reqs]


def agreement(ref: list[list[int]], got: list[list[int]]) -> tuple[int, int, int]:
    """(outputs identical, tokens matching before the first difference, reference tokens)."""
    same = prefix = total = 0
    for a, b in zip(ref, got, strict=True):
        pairs = zip(a, b, strict=False)
        n = next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))
        same += a == b
        prefix += n
        total += len(a)
    return same, prefix, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quantization", default="none,auto,int8,int4",
                   help="comma-separated EngineConfig.quantization values ('none' first)")
    p.add_argument("--tokens", type=int, default=1024, help="tokens of text for perplexity")
    p.add_argument("--max-tokens", type=int, default=48, help="greedy tokens per prompt")
    args = p.parse_args()
    rows, ref = [], None
    for q in args.quantization.split(","):
        config = EngineConfig(quantization=q, profile_on_start=False)
        core = LLMEngine(config)
        if config.resolved_quantization != q:
            q = f"{q} ({config.resolved_quantization})"
        ppl = perplexity(core, text_ids(core.tokenizer, args.tokens))
        out = greedy(core, args.max_tokens)
        ref = ref or out
        rows.append((q, ppl, agreement(ref, out)))
        print(f"  {q}: perplexity {ppl:.4f}", flush=True)
    base = rows[0][1]
    print(f"\n{args.tokens}-token text, {len(PROMPTS)} chat prompts × {args.max_tokens} greedy "
          "tokens, agreement against the first row")
    print("| quantization | perplexity | change | identical outputs | tokens before first "
          "difference |")
    print("|---|---|---|---|---|")
    for q, ppl, (same, prefix, total) in rows:
        print(f"| {q} | {ppl:.4f} | {100 * (ppl / base - 1):+.2f}% | {same}/{len(PROMPTS)} | "
              f"{prefix}/{total} |")


if __name__ == "__main__":
    main()
