"""Why eager decode was slow on the H200: SDPA's backends on a decode-shaped call, fixed and
growing KV lengths; transformers' one-token forward with each backend set; agentrt's torch
attention backend per layer-step with and without cuDNN's SDPA; one small kernel launch.

torch 2.11 tries cuDNN's SDPA first on Hopper and cuDNN plans every new shape, so a decode
whose KV grows a token a step pays a new plan each call (docs/gpu.md has the
figures of 2026-11-27). Run on a CUDA GPU; nothing is downloaded (the model is a random-weight
one of SmolLM2-135M's shape). This is the one-off probe that measured them, rearranged into
functions with ``--help`` and a CUDA check; in this form it has not run on a GPU yet.

    python benchmarks/gpu_sdpa.py
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

SETS = {"default": None, "cudnn": ["CUDNN_ATTENTION"], "flash": ["FLASH_ATTENTION"],
        "efficient": ["EFFICIENT_ATTENTION"], "math": ["MATH"],
        "no-cudnn": ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"]}
"""Backend sets: None = torch's own choice."""
DEV, DT = "cuda", torch.bfloat16


def ctx(name: str) -> contextlib.AbstractContextManager:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = SETS[name]
    return contextlib.nullcontext() if names is None else sdpa_kernel(
        [getattr(SDPBackend, n) for n in names])


def sdpa_us(name: str, grow: bool, n: int = 60, b: int = 1) -> float:
    """Microseconds per decode-shaped SDPA call (9 query heads, 3 KV heads, head_dim 64)."""
    q = torch.randn(b, 9, 1, 64, device=DEV, dtype=DT)
    kv = torch.randn(b, 3, 64 + n + 10, 64, device=DEV, dtype=DT)
    with ctx(name):
        for _ in range(5):
            F.scaled_dot_product_attention(q, kv[:, :, :64], kv[:, :, :64], enable_gqa=True)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(n):
            length = 64 + (i if grow else 0)
            F.scaled_dot_product_attention(q, kv[:, :, :length], kv[:, :, :length],
                                           enable_gqa=True)
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def launch_us() -> float:
    x = torch.zeros(16, device=DEV)
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / 2000 * 1e6


def hf_forward_ms(attn: str, name: str) -> float:
    """transformers' one-token forward on a growing cache, SmolLM2-135M's shape, random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                      max_position_embeddings=2048, tie_word_embeddings=True)
    m = LlamaForCausalLM._from_config(cfg, attn_implementation=attn, dtype=DT).to(DEV).eval()
    with torch.inference_mode(), ctx(name):
        ids = torch.randint(0, 1000, (1, 64), device=DEV)
        past = m(ids, use_cache=True).past_key_values
        tok = ids[:, -1:]
        for _ in range(3):
            m(tok, past_key_values=past, use_cache=True)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            m(tok, past_key_values=past, use_cache=True)
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / 20 * 1e3


def agentrt_layer_step_us(name: str) -> tuple[float, float]:
    """agentrt's torch attention backend at batch 1: (plan, forward) microseconds per
    layer-step over random decode batches (a new KV length each step)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import build_batch

    from agentrt.attention import KVCacheTensors
    from agentrt.attention.torch_ref import TorchRefBackend

    kv = KVCacheTensors.allocate(1, 256, 16, 3, 64, DT, DEV)
    be = TorchRefBackend(kv, 9, 64)
    rng = random.Random(0)
    metas = [build_batch(rng, [(1, None)], page_size=16, num_pages=256) for _ in range(40)]
    q, k, v = (torch.randn(1, h, 64, device=DEV, dtype=DT) for h in (9, 3, 3))
    with ctx(name):
        for meta in metas[:5]:
            be.plan(meta)
            be.forward(0, q, k, v)
        torch.cuda.synchronize()
        t, planning = time.perf_counter(), 0.0
        for meta in metas[5:]:
            t0 = time.perf_counter()
            be.plan(meta)
            planning += time.perf_counter() - t0
            be.forward(0, q, k, v)
        torch.cuda.synchronize()
    n = len(metas) - 5
    return planning / n * 1e6, ((time.perf_counter() - t) - planning) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog=__doc__.split("\n\n", 1)[1]).parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_sdpa.py needs a CUDA GPU", file=sys.stderr)
        return 1
    print(torch.__version__, "cuDNN", torch.backends.cudnn.version(), flush=True)
    print(f"one small kernel launch (add_, eager): {launch_us():.1f} us")
    for name in SETS:
        for grow in (False, True):
            try:
                print(f"SDPA {name:9s} {'growing' if grow else 'fixed  '} L: "
                      f"{sdpa_us(name, grow):8.1f} us/call", flush=True)
            except RuntimeError as exc:
                print(f"SDPA {name} grow={grow}: {str(exc)[:120]}")
    hf_sets = (("sdpa", ("default", "no-cudnn", "flash", "math")), ("eager", ("default",)))
    for attn, names in hf_sets:
        for name in names:
            try:
                print(f"HF {attn} [{name}] one-token forward (growing cache): "
                      f"{hf_forward_ms(attn, name):.2f} ms", flush=True)
            except RuntimeError as exc:
                print(f"HF {attn} [{name}]: {str(exc)[:120]}")
    for name in ("default", "no-cudnn"):
        try:
            plan, forward = agentrt_layer_step_us(name)
            print(f"agentrt torch backend [{name}] batch-1 decode: plan {plan:.0f} us + forward "
                  f"{forward:.0f} us per layer-step", flush=True)
        except Exception:  # noqa: BLE001 - report and go on
            traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main())
