"""EngineConfig: every knob of an :class:`agentrt.Engine`, frozen and validated.

The ``resolved_*`` properties turn the "auto" choices into what an engine built from this
config will use on this machine (device, dtype, attention backend); nothing here imports CUDA
code, and a CPU config never asks torch about CUDA.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Literal, get_args

__all__ = ["EngineConfig"]

DType = Literal["auto", "float32", "bfloat16", "float16"]
Quantization = Literal["auto", "gguf", "none", "int8", "int4"]
GGUFActivations = Literal["auto", "float32", "int8"]
CpuDecodeThreads = Literal["adaptive", "fixed"]
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
"""What ``device`` may be (``re.fullmatch``)."""
CPU_ONLY_QUANTIZATIONS = frozenset({"gguf", "int8", "int4"})
"""Weight formats run by agentrt's CPU kernels only (``agentrt_kernels.cpu``)."""


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings. Derived values are properties; invariants are checked on creation."""

    model: str | None = None
    """Model name or local folder; None = the embedded default (SmolLM2-135M-Instruct)."""
    device: str = "auto"
    """Where weights, the KV pool, each step's tensors and sampling live: "cpu", "cuda",
    "cuda:N", or "auto" = "cuda" when ``torch.cuda.is_available()`` (and the weight format can
    run there), else "cpu". The host KV pool (``host_kv_cache_gb``) is pinned CPU memory on
    CUDA, and swaps to it run on a side CUDA stream."""
    dtype: DType = "auto"
    """Weight and KV dtype; "auto" = float32 on CPU (see docs/engine.md: measured choice),
    bfloat16 on a GPU that supports it, float16 on one that does not."""
    quantization: Quantization = "auto"
    """Weight format: "auto" = the model file's own ("gguf" for a GGUF file on the CPU in
    float32, the embedded default's Q4_1 layers included; "none" for a Hugging Face folder, or
    on a GPU). "gguf" = each weight in the GGUF file's own blocks (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0,
    Q4_K/Q5_K/Q6_K, F16/BF16/F32) on agentrt's CPU kernels, memory about the file's size.
    Otherwise a name in :data:`agentrt.models.linear.LINEARS`: "none" = float weights in
    ``dtype`` (a GGUF file is dequantized to float32 once into the cache). A float folder stays
    float32 on CPU: on this project's AVX-512-BF16 CPU (torch 2.13, one thread, the 135M
    model's layer shapes) bfloat16 linears took 0.7-1.3x float32's time for one row, the
    batch-1 decode an agent run mostly is, and 0.35-0.7x for 8 rows: not faster where it
    matters most, and float32 keeps transformers' greedy outputs. "int8" / "int4" = float
    weights re-quantized to GGUF Q8_0 / Q4_1 groups. "gguf", "int8", "int4" compute in
    float32 on the CPU only: with ``device="cuda"`` they are refused with an error, not
    dequantized; ``device="auto"`` then stays on the CPU."""
    gguf_activations: GGUFActivations = "auto"
    """How a GGUF file's block weights (``quantization="gguf"``) meet the activations. "float32"
    = activations stay float32 against the file's values dequantized exactly (gguf's own
    ``dequantize``): transformers' outputs on the dequantized model, up to summation order.
    "int8" = llama.cpp's numeric path: each activation row is quantized to 8 bits per block
    (ggml's Q8_0, per 32 values, against Q4_0/Q4_1/Q5_0/Q5_1/Q8_0; Q8_K, per 256, against
    Q4_K/Q5_K/Q6_K) and meets the blocks in integer dot products (AVX-512 VNNI, else AVX2):
    the faster path (the 135M default's linears: 1.3-1.6x), llama.cpp's matrix arithmetic.
    F16/BF16/F32 tensors always run float32. "auto" = "int8" for the block formats where
    it keeps llama.cpp's quality, "float32" for the others: issue 33's rule, measured per
    format on the benchmark files (teacher-forced top-1 agreement with llama.cpp at least
    llama.cpp's own variants' lowest, perplexity within 1% of llama.cpp's), kept as data in
    :data:`agentrt.models.gguf_weights.AUTO_INT8_FORMATS` with its figures, and only where
    the batched integer kernels are batch-invariant (none yet, so "auto" runs "float32"
    today; the default model's Q4_1 passes the quality rule). Ignored by the other
    quantizations."""
    block_size: int = 16
    """Tokens per KV block (page)."""
    num_blocks: int | None = None
    """KV blocks in the device pool; None = derived from ``kv_cache_gb``."""
    kv_cache_gb: float = 1.0
    """Device KV pool size when ``num_blocks`` is not given."""
    host_kv_cache_gb: float = 0.0
    """Host-side pool for swapped-out KV (0 = no swapping)."""
    max_num_seqs: int = 64
    """Most requests running at once."""
    max_num_batched_tokens: int = 512
    """Token budget of one step (prefill chunks + decodes)."""
    max_model_len: int | None = None
    """Longest sequence (prompt + output); None = the model's limit, capped by the pool."""
    enable_prefix_cache: bool = True
    """Reuse KV of earlier requests that share a prompt prefix."""
    attention_backend: str = "auto"
    """"auto" or a name in :data:`agentrt.attention.BACKENDS`: "torch" (SDPA over gathered
    pages, any device), "torch_cascade" (a prefix shared by several requests is attended once
    per group), "cpu" (decode rows by agentrt's C++ kernel), "flashinfer", "flashinfer_cascade"
    (CUDA, float16/bfloat16). "auto" = "flashinfer" on CUDA in float16/bfloat16 when FlashInfer
    is installed and can build or load its kernels (``nvcc``, or ``flashinfer-jit-cache``), else
    "torch" (with one warning at engine start saying how to get the kernels)."""
    fused_ops: bool | None = None
    """Run RMSNorm, RoPE and (with the "torch" backend, which then becomes "cpu") decode
    attention as agentrt's C++ ops (``agentrt_kernels.cpu.decode_ops``): fewer, larger calls
    per decode step. None = on with int8/int4 weights, off otherwise (the float model then
    keeps torch's exact arithmetic). CPU only."""
    enforce_eager: bool = False
    """Run every decode step through the Python forward pass. Otherwise, on CUDA, decode steps
    of up to :attr:`cuda_graph_batch_sizes` requests (padded to the next captured size) replay
    CUDA graphs captured after warm-up; on the CPU, a decode step of a model on a GGUF file's
    own blocks is one C++ call (``agentrt.engine.cpu_step``; same kernels, same order). Prefill
    is always eager."""
    num_threads: int | None = None
    """torch intra-op threads; None = leave torch's default."""
    cpu_decode_threads: CpuDecodeThreads = "adaptive"
    """Threads of a CPU decode step (the one C++ call of ``enforce_eager=False``):
    ``"adaptive"`` runs all the intra-op threads while each gets its CPU and fewer while other
    processes take cores (a tool's subprocess, another program), probing back up every few
    steps (``agentrt.engine.cpu_threads``); ``"fixed"`` always runs all of them."""
    interception_handling: str = "least-waste"
    """What happens to a paused request's KV: a name in :data:`agentrt.intercept.HANDLINGS`
    (preserve, discard, swap, least-waste)."""
    scheduling_policy: str = "fcfs"
    """Order of admission: a name in :data:`agentrt.scheduler.POLICIES` (fcfs, arrival, lamps)."""
    starvation_threshold: int = 100
    """lamps: steps a request may be passed over before it takes priority until it completes."""
    score_refresh_interval: int = 1
    """lamps: recompute scores every this many steps."""
    profile_on_start: bool = True
    """Time a few forward passes at start-up to fit T_fwd(tokens) for the interception
    policies (refined online from every step)."""

    @property
    def resolved_device(self) -> str:
        """``device`` resolved: "cpu" or "cuda:N". Raises ValueError for a CUDA device this
        machine does not have."""
        if self.device == "cpu":
            return "cpu"
        import torch

        if self.device == "auto":
            if self._needs_cpu or not torch.cuda.is_available():
                return "cpu"
            return f"cuda:{torch.cuda.current_device()}"
        if not torch.cuda.is_available():
            raise ValueError(f"device={self.device!r} but torch sees no CUDA GPU "
                               f"(torch {torch.__version__}, CUDA build: {torch.version.cuda})")
        index = int(self.device.partition(":")[2] or torch.cuda.current_device())
        if index >= torch.cuda.device_count():
            raise ValueError(f"device={self.device!r} but torch sees "
                               f"{torch.cuda.device_count()} CUDA GPU(s)")
        return f"cuda:{index}"

    @property
    def resolved_dtype(self) -> str:
        """``dtype`` resolved: float32 on CPU; bfloat16 (float16 where unsupported) on CUDA."""
        if self.dtype != "auto":
            return self.dtype
        device = self.resolved_device
        if device == "cpu":
            return "float32"
        import torch

        with torch.cuda.device(device):
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"

    @property
    def resolved_quantization(self) -> str:
        """``quantization`` resolved: "auto" becomes "gguf" when the model is a GGUF file and
        the engine computes in float32 on the CPU, "none" otherwise (locates the model)."""
        if self.quantization != "auto":
            return self.quantization
        if self.resolved_device != "cpu" or self.resolved_dtype != "float32":
            return "none"
        from agentrt.models.linear import resolve_quantization
        from agentrt.models.sources import locate

        path, _ = locate(self.model)
        return resolve_quantization("auto", path.is_file())

    @property
    def resolved_gguf_activations(self) -> str:
        """``gguf_activations`` as the file's linears resolve it: "float32" and "int8" as
        given; "auto" stays "auto", chosen per block format as the file loads (see the
        field)."""
        return self.gguf_activations

    @property
    def uses_fused_ops(self) -> bool:
        """``fused_ops`` resolved: as given, or on for quantized weights."""
        if self.fused_ops is not None:
            return self.fused_ops
        return self.resolved_quantization != "none"

    @property
    def auto_attention_fallback(self) -> str | None:
        """Why ``attention_backend="auto"`` runs "torch" on a CUDA device in float16/bfloat16
        (FlashInfer is not installed, or finds neither ``nvcc`` nor its prebuilt kernels), or
        None when it does not fall back. Probes the machine (no import of FlashInfer)."""
        if self.attention_backend != "auto" or self.device == "cpu" or \
                self.resolved_device == "cpu" or self.resolved_dtype not in ("float16",
                                                                             "bfloat16"):
            return None
        from agentrt_kernels.flashinfer_toolchain import flashinfer_unusable_reason

        return flashinfer_unusable_reason()

    @property
    def resolved_attention_backend(self) -> str:
        """``attention_backend`` resolved: "auto" becomes "flashinfer" on CUDA in float16 or
        bfloat16 when FlashInfer's kernels can run there (installed, and ``nvcc`` or its
        prebuilt kernels found: :attr:`auto_attention_fallback`), "torch" otherwise; "torch"
        becomes "cpu" when fused ops are on."""
        name = self.attention_backend
        if name == "auto":
            name = "torch"
            if self.device != "cpu" and self.resolved_device != "cpu" and \
                    self.resolved_dtype in ("float16", "bfloat16") and \
                    self.auto_attention_fallback is None:
                name = "flashinfer"
        if name == "torch" and self.uses_fused_ops:
            return "cpu"
        return name

    @property
    def cuda_graph_batch_sizes(self) -> tuple[int, ...]:
        """Decode batch sizes captured as CUDA graphs: 1, 2, 4, 8, then multiples of 8 up to
        ``max_num_seqs`` (capped at 256); () with ``enforce_eager``."""
        if self.enforce_eager:
            return ()
        top = min(self.max_num_seqs, 256)
        sizes = (1, 2, 4, *range(8, 264, 8))
        covering = next(s for s in sizes if s >= top)
        return tuple(s for s in sizes if s <= covering)

    @property
    def _needs_cpu(self) -> str | None:
        """The CPU-only option this config asks for, if any."""
        if self.quantization in CPU_ONLY_QUANTIZATIONS:
            return f"quantization={self.quantization!r}"
        if self.fused_ops:
            return "fused_ops=True"
        if self.attention_backend == "cpu":
            return "attention_backend='cpu'"
        return None

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError("block_size must be a positive power of two")
        if self.num_blocks is not None and self.num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        if self.kv_cache_gb <= 0 or self.host_kv_cache_gb < 0:
            raise ValueError("kv_cache_gb must be > 0 and host_kv_cache_gb >= 0")
        if self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.dtype not in get_args(DType):
            raise ValueError(f"unknown dtype {self.dtype!r}; choose from {list(get_args(DType))}")
        if self.gguf_activations not in get_args(GGUFActivations):
            raise ValueError(f"unknown gguf_activations {self.gguf_activations!r}; choose from "
                             f"{list(get_args(GGUFActivations))}")
        if self.cpu_decode_threads not in get_args(CpuDecodeThreads):
            raise ValueError(f"unknown cpu_decode_threads {self.cpu_decode_threads!r}; choose "
                             f"from {list(get_args(CpuDecodeThreads))}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 (or None), got {self.num_threads}")
        self._check_device()
        self._check_policies()
        self._check_names()

    def _check_names(self) -> None:
        """Names that registries define, checked against them here (imported only now, so this
        module imports nothing of agentrt at load time)."""
        from agentrt.attention import BACKENDS
        from agentrt.models.linear import check_quantization

        if self.attention_backend != "auto" and self.attention_backend not in BACKENDS:
            raise ValueError(f"unknown attention_backend {self.attention_backend!r}; "
                             f"choose from {['auto', *sorted(BACKENDS)]}")
        check_quantization(self.quantization)

    def _check_device(self) -> None:
        if not isinstance(self.device, str) or not DEVICE_PATTERN.fullmatch(self.device):
            raise ValueError(f"unknown device {self.device!r}; choose from 'auto', 'cpu', "
                             "'cuda', 'cuda:N'")
        cpu_only = self._needs_cpu
        if self.device.startswith("cuda") and cpu_only:
            raise ValueError(f"{cpu_only} runs on agentrt's CPU kernels only (no dequantizing "
                             f"at load); with device={self.device!r} leave it out (quantization="
                             "'none' keeps the weights in dtype), or use device='cpu'")

    def _check_policies(self) -> None:
        from agentrt.intercept import HANDLINGS
        from agentrt.scheduler.policies import POLICIES

        if self.interception_handling not in HANDLINGS:
            raise ValueError(f"unknown interception_handling {self.interception_handling!r}; "
                             f"choose from {sorted(HANDLINGS)}")
        if self.scheduling_policy not in POLICIES:
            raise ValueError(f"unknown scheduling_policy {self.scheduling_policy!r}; "
                             f"choose from {sorted(POLICIES)}")
        if self.starvation_threshold <= 0 or self.score_refresh_interval <= 0:
            raise ValueError("starvation_threshold and score_refresh_interval must be positive")


def _named_fields(init):  # noqa: ANN001, ANN202 - wraps the dataclass's own __init__
    """``EngineConfig(kv_cache_gigs=1)`` names the field meant ("did you mean"), where the
    dataclass said only "unexpected keyword argument"."""
    names = tuple(f.name for f in fields(EngineConfig))

    def __init__(self: EngineConfig, *args: object, **kwargs: object) -> None:
        if not set(kwargs) <= set(names):
            from agentrt.core.fields import check_known  # NOTE: none at module level (above)

            check_known("EngineConfig", kwargs, names)
        init(self, *args, **kwargs)

    __init__.__doc__, __init__.__wrapped__ = init.__doc__, init
    return __init__


EngineConfig.__init__ = _named_fields(EngineConfig.__init__)  # type: ignore[method-assign]
