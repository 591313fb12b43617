"""What quantized weights cost in quality: perplexity, next-token and greedy agreement, against
agentrt's first run and against llama.cpp on the same file.

``--model`` is any GGUF file (or name agentrt finds; default: the embedded SmolLM2-135M-Instruct
Q4_1 GGUF; ``benchmarks/make_gguf.py`` makes Q4_K_M / Q8_0 / Q4_1 files of it and of a 0.5B
random-weight llama). For each ``--quantization`` the engine is built with those weights
("auto" runs the GGUF's own blocks; "none" its float32 conversion) — and, for runs on the
file's own blocks, once per ``--gguf-activations`` value (``EngineConfig.gguf_activations``:
"float32", or "int8", llama.cpp's numeric path; passed only when agentrt has the field) — and
measured on:

- **perplexity** of a fixed text (standard-library module docstrings, ``--tokens`` tokens, no
  BOS) under teacher forcing: one window over the whole text, no stride — one forward pass of
  agentrt's own model (torch reference attention on a fresh paged KV), the log-probability of
  every next token;
- **next-token agreement**: at how many positions of that text the most likely next token is
  the same (teacher-forced, so one difference does not carry on);
- **greedy agreement** on chat prompts: how many outputs are identical, and how many generated
  tokens match before the first difference (one near-tie decided the other way changes all
  that follows, so this count is chaotic; the next-token share is the stable measure).

llama.cpp (llama-cpp-python, when installed and the model is a file) runs the same file on the
same token ids: perplexity from one ``eval`` of the whole text with ``logits_all=True`` (the
same single window), greedy outputs from the same prompt ids, ending at the same EOS ids.
``--llamacpp-variants`` also runs llama.cpp with one of its own settings changed (flash
attention, an f32 KV cache, the prompt fed one token at a time): how closely llama.cpp
reproduces its own greedy outputs is the scale for how closely agentrt does.

    python benchmarks/quant_quality.py                      # none, auto, int8, int4
    python benchmarks/quant_quality.py --tokens 1024 --max-tokens 64
    python benchmarks/quant_quality.py --model FILE.gguf --quantization auto \\
        --gguf-activations float32,int8 --llamacpp-variants
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import importlib.util
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
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
HAS_GGUF_ACTIVATIONS = "gguf_activations" in {f.name for f in dataclasses.fields(EngineConfig)}
"""Whether this agentrt has ``EngineConfig.gguf_activations`` (the script runs either way)."""


class Run(NamedTuple):
    """One measured engine: its label, perplexity, its most likely next token at each position
    of the text (teacher-forced) and greedy outputs (token ids per prompt)."""

    name: str
    perplexity: float
    top1: list[int]
    outputs: list[list[int]]


def text_ids(tokenizer, n: int) -> list[int]:
    text = "\n\n".join(importlib.import_module(m).__doc__ or "" for m in _TEXT_MODULES)
    return tokenizer.encode(text, add_special_tokens=False)[:n]


def prompt_ids(tokenizer) -> list[list[int]]:
    """:data:`PROMPTS` in the model's chat template, tokenized as agentrt tokenizes text."""
    return [tokenizer.encode(tokenizer.apply_chat_template(
        [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False),
        add_special_tokens=False) for p in PROMPTS]


@torch.inference_mode()
def teacher_forced(core: LLMEngine, ids: list[int]) -> tuple[float, list[int]]:
    """exp(mean NLL of ids[1:]) and the most likely next token at each position, from one
    teacher-forced forward pass over ``ids``."""
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
    return nll_perplexity(logits, ids), logits.argmax(-1).tolist()


def nll_perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    """exp(mean cross-entropy) of ``logits`` (one row per position of ``ids[:-1]``)."""
    nll = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(ids[1:]))
    return math.exp(float(nll))


def greedy(core: LLMEngine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
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


# --- agentrt runs ----------------------------------------------------------------------------
def engine_configs(args: argparse.Namespace) -> list[tuple[str, EngineConfig]]:
    """(label, config) per run: each quantization, and per activation path for GGUF blocks."""
    runs = []
    for q in args.quantization:
        config = EngineConfig(model=args.model, quantization=q, profile_on_start=False)
        resolved = config.resolved_quantization
        label = q if resolved == q else f"{q} ({resolved})"
        if resolved != "gguf" or not HAS_GGUF_ACTIVATIONS:
            runs.append((label, config))
            continue
        for a in args.gguf_activations or [config.gguf_activations]:
            run = dataclasses.replace(config, gguf_activations=a)
            path = run.resolved_gguf_activations
            runs.append((f"{label}, {a if a == path else f'{a}={path}'} activations", run))
    return runs


def measure_agentrt(label: str, core: LLMEngine, text: list[int], prompts: list[list[int]],
                    max_tokens: int) -> Run:
    run = Run(f"agentrt {label}", *teacher_forced(core, text),
              greedy(core, prompts, max_tokens))
    print(f"  {run.name}: perplexity {run.perplexity:.4f}", flush=True)
    return run


# --- llama.cpp on the same file ----------------------------------------------------------------
LLAMACPP_VARIANTS: dict[str, dict] = {
    "flash attention": {"flash_attn": True},
    "f32 KV cache": {"type_k": 0, "type_v": 0},  # GGML_TYPE_F32; the default cache is f16
    "prompt one token at a time": {"n_batch": 1, "n_ubatch": 1},
}
"""llama.cpp with one of its own settings changed (``Llama(**overrides)``), by label."""


def measure_llamacpp(path: Path, text: list[int], prompts: list[list[int]], max_tokens: int,
                     eos: set[int], variant: str | None = None) -> Run:
    """llama.cpp's perplexity of ``text`` (one window, ``logits_all``) and greedy outputs, with
    its default settings or those of :data:`LLAMACPP_VARIANTS` ``[variant]``."""
    from _llamacpp import greedy, open_llama

    n_ctx = max(len(text), max(map(len, prompts)) + max_tokens) + 8
    kwargs = dict(n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True)
    llm = open_llama(path, **{**kwargs, **(LLAMACPP_VARIANTS[variant] if variant else {})})
    try:
        llm.eval(text)
        logits = torch.from_numpy(np.array(llm.scores[: len(text) - 1], dtype=np.float32))
        ppl, top1 = nll_perplexity(logits, text), logits.argmax(-1).tolist()
        outputs = [greedy(llm, p, max_tokens, eos) for p in prompts]
    finally:
        llm.close()
    run = Run(f"llama.cpp, {variant}" if variant else "llama.cpp", ppl, top1, outputs)
    print(f"  {run.name}: perplexity {ppl:.4f}", flush=True)
    return run


def llamacpp_file(args: argparse.Namespace) -> Path | None:
    """The GGUF file llama.cpp runs, or None (saying why) when it cannot."""
    from agentrt.models.sources import locate

    path, _ = locate(args.model)
    why = ("--no-llamacpp" if args.no_llamacpp else
           "llama-cpp-python is not installed (`pip install -e .[bench]`)"
           if importlib.util.find_spec("llama_cpp") is None else
           "the model is a folder, not a GGUF file" if not path.is_file() else None)
    if why:
        print(f"llama.cpp: skipped ({why})")
        return None
    return path


# --- report ----------------------------------------------------------------------------------
def print_table(runs: list[Run], llama: list[Run], args: argparse.Namespace) -> None:
    """One row per run; the agreement columns against the first agentrt run and, when llama.cpp
    ran, against llama.cpp with its default settings (``llama[0]``; its variants follow it)."""
    base = runs[0]
    print(f"\n{len(runs[0].outputs)} chat prompts × up to {args.max_tokens} greedy tokens; "
          f"{args.tokens}-token text, one window")
    head = ["run", "perplexity", f"vs {base.name}", "same next token", "identical outputs",
            "tokens before first difference"]
    if llama:
        head += ["vs llama.cpp", "same next token as llama.cpp", "identical to llama.cpp",
                 "tokens before first difference"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for run in [*runs, *llama]:
        same, prefix, total = agreement(base.outputs, run.outputs)
        cells = [run.name, f"{run.perplexity:.4f}", change(run, base), top1_match(run, base),
                 f"{same}/{len(PROMPTS)}", f"{prefix}/{total}"]
        if llama:
            same, prefix, total = agreement(llama[0].outputs, run.outputs)
            cells += [change(run, llama[0]), top1_match(run, llama[0]), f"{same}/{len(PROMPTS)}",
                      f"{prefix}/{total}"]
        print("| " + " | ".join(cells) + " |")


def print_verdicts(runs: list[Run], llama: list[Run]) -> None:
    """Issue 33's rule for ``gguf_activations="auto"``, per agentrt run: its numeric path holds
    on this file when (a) its teacher-forced top-1 agreement with llama.cpp is at least the
    lowest of llama.cpp's own variants' and (b) its perplexity is within 1% of llama.cpp's."""
    if len(llama) < 2:
        print("\nverdict: needs llama.cpp and --llamacpp-variants")
        return
    base, floor = llama[0], min(top1_share(v, llama[0]) for v in llama[1:])
    print(f"\nverdict (top-1 agreement >= llama.cpp variants' lowest, {floor:.2f}%; "
          f"perplexity within ±{100 * PERPLEXITY_BAND:.0f}% of llama.cpp's)")
    for run in runs:
        agree, delta = top1_share(run, base), run.perplexity / base.perplexity - 1
        holds = agree >= floor and abs(delta) <= PERPLEXITY_BAND
        print(f"  {run.name}: top-1 {agree:.2f}% {'>=' if agree >= floor else '<'} "
              f"{floor:.2f}%, perplexity {100 * delta:+.2f}% -> "
              f"{'holds' if holds else 'fails'}")


PERPLEXITY_BAND = 0.01
"""Issue 33: the perplexity of a path that holds is within this share of llama.cpp's."""


def file_formats(path: Path | None) -> str:
    """The block formats of the file's matrices, with their counts (what the verdict is of)."""
    if path is None:
        return "?"
    from collections import Counter

    from agentrt.models.gguf_file import GGUFFile

    counts = Counter(t.qtype.name for t in GGUFFile(path).tensors.values() if len(t.shape) == 2)
    return ", ".join(f"{name} x{n}" for name, n in counts.most_common())


def change(run: Run, ref: Run) -> str:
    return f"{100 * (run.perplexity / ref.perplexity - 1):+.2f}%"


def top1_share(run: Run, ref: Run) -> float:
    """The percentage of the text's positions where both pick the same most likely next token
    (each on the true text so far: a difference does not carry on, as in greedy outputs)."""
    same = sum(a == b for a, b in zip(run.top1, ref.top1, strict=True))
    return 100 * same / len(ref.top1)


def top1_match(run: Run, ref: Run) -> str:
    return f"{top1_share(run, ref):.2f}%"


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n    python")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None,
                   help="a .gguf file or any name agentrt finds (default: the embedded "
                        "SmolLM2-135M-Instruct Q4_1 GGUF); llama.cpp runs the same file")
    p.add_argument("--quantization", default="none,auto,int8,int4",
                   help="comma-separated EngineConfig.quantization values; the first is the "
                        "reference of the agreement columns (default: %(default)s)")
    p.add_argument("--gguf-activations", default=None,
                   help="comma-separated EngineConfig.gguf_activations values (auto, float32, "
                        "int8) for the runs on the GGUF's own blocks; default: the engine's")
    p.add_argument("--tokens", type=int, default=1024, help="tokens of text for perplexity")
    p.add_argument("--max-tokens", type=int, default=48, help="greedy tokens per prompt")
    p.add_argument("--no-llamacpp", action="store_true", help="skip llama.cpp")
    p.add_argument("--llamacpp-variants", action="store_true",
                   help="also run llama.cpp with each of: " + ", ".join(LLAMACPP_VARIANTS)
                        + " (how closely llama.cpp reproduces itself)")
    args = p.parse_args(argv)
    args.quantization = args.quantization.split(",")
    if args.gguf_activations is not None:
        args.gguf_activations = args.gguf_activations.split(",")
        if not HAS_GGUF_ACTIVATIONS:
            print("note: this agentrt has no EngineConfig.gguf_activations; --gguf-activations "
                  "is ignored (each run uses the engine's only numeric path)")
            args.gguf_activations = None
    if args.tokens < 2 or args.max_tokens < 1:
        p.error("need --tokens >= 2 and --max-tokens >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    path = llamacpp_file(args)
    runs: list[Run] = []
    for label, config in engine_configs(args):
        core = LLMEngine(config)
        text, prompts = text_ids(core.tokenizer, args.tokens), prompt_ids(core.tokenizer)
        runs.append(measure_agentrt(label, core, text, prompts, args.max_tokens))
        eos = core.eos_token_ids
        del core
        gc.collect()
    variants = [None, *(LLAMACPP_VARIANTS if args.llamacpp_variants else ())]
    llama = ([measure_llamacpp(path, text, prompts, args.max_tokens, eos, v) for v in variants]
             if path is not None else [])
    print(f"\nfile: {path.name if path else args.model}; matrices: {file_formats(path)}")
    print_table(runs, llama, args)
    print_verdicts(runs, llama)


if __name__ == "__main__":
    main()
