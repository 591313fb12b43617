"""How fast the GGUF block-format kernels stream their weights, per format and batch size.

Decode reads every weight once per step, so the floor is the weight bytes over the memory
bandwidth (measured here with a large read). For each format, a stack of 4096 x 4096 layers
larger than the last-level cache is called round-robin at T=1 and T=8, on both numeric paths
(``float32``: exact weights; ``int8``: llama.cpp's integer dot products); the script prints the
GB/s of weight bytes streamed and the fraction of the floor that is.

    python benchmarks/gguf_kernels.py                       # the formats users have most
    python benchmarks/gguf_kernels.py --formats Q4_K Q8_0 --size 4096 --seconds 2
    python benchmarks/gguf_kernels.py --threads 1     # a busy machine: no waits at barriers
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from agentrt_kernels.cpu.gguf_linear import Activations, GGUFLinear

HOT = ["Q4_K", "Q6_K", "Q8_0", "Q4_1", "Q5_K"]
SCALES = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
          "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}  # byte offsets of f16 scales


def random_layer(name: str, size: int, rng: np.random.Generator,
                 activations: Activations = "float32") -> GGUFLinear:
    """A size x size layer of random valid blocks (finite scales, normal float weights)."""
    qtype = GGMLQuantizationType[name]
    if name in ("F32", "F16", "BF16"):
        w = torch.from_numpy(rng.standard_normal((size, size), dtype=np.float32))
        dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[name]
        raw = w.to(dtype).view(torch.uint8).reshape(-1)
    else:
        block, nbytes = GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, (size * size // block, nbytes), dtype=np.uint8)
        for at in SCALES[name]:
            scale = rng.uniform(1e-3, 2e-2, len(blocks)).astype(np.float16)
            blocks[:, at:at + 2] = scale.view(np.uint8).reshape(-1, 2)
        raw = torch.from_numpy(blocks.reshape(-1))
    return GGUFLinear(raw, qtype, (size, size), activations=activations)


def read_bandwidth(gigabytes: float = 1.0) -> float:
    """GB/s of a multi-threaded read of a buffer far larger than the caches."""
    x = torch.ones(int(gigabytes * 2**30) // 4)
    x.sum()
    start = time.perf_counter()
    for _ in range(3):
        x.sum()
    return 3 * x.numel() * 4 / (time.perf_counter() - start) / 1e9


def streamed(layers: list[GGUFLinear], rows: int, seconds: float) -> float:
    """GB/s of weight bytes the kernel streams at ``rows`` activation rows."""
    h = torch.randn(rows, layers[0].in_features)
    for layer in layers:
        layer(h)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for layer in layers:
            layer(h)
        calls += len(layers)
    return calls * layers[0].nbytes / (time.perf_counter() - start) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=HOT)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--activations", nargs="+", default=["float32", "int8"])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--min-mb", type=float, default=128, help="weights per format, MB")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bandwidth = read_bandwidth()
    print(f"threads {torch.get_num_threads()}, read bandwidth {bandwidth:.1f} GB/s (the floor)")
    heads = [f"{a} T={b}" for a in args.activations for b in args.batches]
    print(f"{'format':6} {'B/w':>6} " + " ".join(f"{h:>16}" for h in heads))
    rng = np.random.default_rng(0)
    for name in args.formats:
        first = random_layer(name, args.size, rng)
        count = max(1, int(args.min_mb * 1e6 // first.nbytes))
        layers = [first] + [random_layer(name, args.size, rng) for _ in range(count - 1)]
        cells = []
        for activations in args.activations:
            path = [GGUFLinear(w.raw, w.qtype, w.shape, activations=activations) for w in layers]
            for rows in args.batches:
                rate = streamed(path, rows, args.seconds)
                cells.append(f"{rate:6.1f} GB/s {rate / bandwidth:4.0%}")
        per_weight = first.nbytes / args.size**2
        print(f"{name:6} {per_weight:6.3f} " + " ".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
