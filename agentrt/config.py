"""EngineConfig: every knob of an :class:`agentrt.Engine`, frozen and validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["EngineConfig"]

DType = Literal["auto", "float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings. Derived values are properties; invariants are checked on creation."""

    model: str | None = None
    """Model name or local folder; None = the embedded default (SmolLM2-135M-Instruct)."""
    dtype: DType = "auto"
    """Weight and KV dtype; "auto" = float32 on CPU (see README: measured choice)."""
    quantization: str = "none"
    """Weight format of the linear layers: a name in :data:`agentrt.models.linear.LINEARS`
    ("none" = ``dtype``; "int8" / "int4" = GGUF Q8_0 / Q4_1 groups and agentrt's AVX2 decode
    kernels, float32 compute only)."""
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
    attention_backend: str = "torch"
    """Name in :data:`agentrt.attention.BACKENDS`: "torch", "torch_cascade" (a prefix shared by
    several requests is attended once per group), "cpu" (decode rows by agentrt's C++ kernel),
    "flashinfer", "flashinfer_cascade"."""
    fused_ops: bool | None = None
    """Run RMSNorm, RoPE and (with the "torch" backend, which then becomes "cpu") decode
    attention as agentrt's C++ ops (``agentrt_kernels.cpu.decode_ops``): fewer, larger calls
    per decode step. None = on with int8/int4 weights, off otherwise (the float model then
    keeps torch's exact arithmetic)."""
    num_threads: int | None = None
    """torch intra-op threads; None = leave torch's default."""
    interception_handling: str = "least-waste"
    """What happens to a paused request's KV: a name in :data:`agentrt.intercept.HANDLINGS`
    (preserve, discard, swap, least-waste)."""
    scheduling_policy: str = "fcfs"
    """Order of admission: a name in :data:`agentrt.intercept.POLICIES` (fcfs, arrival, lamps)."""
    starvation_threshold: int = 100
    """lamps: steps a request may be passed over before it takes priority until it completes."""
    score_refresh_interval: int = 1
    """lamps: recompute scores every this many steps."""
    profile_on_start: bool = True
    """Time a few forward passes at start-up to fit T_fwd(tokens) for the interception
    policies (refined online from every step)."""

    @property
    def uses_fused_ops(self) -> bool:
        """``fused_ops`` resolved: as given, or on for quantized weights."""
        return self.fused_ops if self.fused_ops is not None else self.quantization != "none"

    @property
    def resolved_attention_backend(self) -> str:
        """``attention_backend``, with "torch" becoming "cpu" when fused ops are on."""
        if self.attention_backend == "torch" and self.uses_fused_ops:
            return "cpu"
        return self.attention_backend

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError("block_size must be a positive power of two")
        if self.num_blocks is not None and self.num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        if self.kv_cache_gb <= 0 or self.host_kv_cache_gb < 0:
            raise ValueError("kv_cache_gb must be > 0 and host_kv_cache_gb >= 0")
        if self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"unknown dtype {self.dtype!r}")
        self._check_policies()
        from agentrt.attention import BACKENDS
        from agentrt.models.linear import LINEARS

        if self.attention_backend not in BACKENDS:
            raise ValueError(f"unknown attention_backend {self.attention_backend!r}; "
                             f"choose from {sorted(BACKENDS)}")

        if self.quantization not in LINEARS:
            raise ValueError(f"unknown quantization {self.quantization!r}; "
                             f"choose from {sorted(LINEARS)}")

    def _check_policies(self) -> None:
        from agentrt.intercept import HANDLINGS, POLICIES

        if self.interception_handling not in HANDLINGS:
            raise ValueError(f"unknown interception_handling {self.interception_handling!r}; "
                             f"choose from {sorted(HANDLINGS)}")
        if self.scheduling_policy not in POLICIES:
            raise ValueError(f"unknown scheduling_policy {self.scheduling_policy!r}; "
                             f"choose from {sorted(POLICIES)}")
        if self.starvation_threshold <= 0 or self.score_refresh_interval <= 0:
            raise ValueError("starvation_threshold and score_refresh_interval must be positive")
