"""agentrt's CPU kernels: weight-only quantized linear layers for memory-bound decode.

:mod:`.gguf_linear` runs GGUF's own block formats; :mod:`.quant_linear` agentrt's Q8/Q4 forms.

Each kernel is C++ built on first use into the user cache (:mod:`.build`), wrapped by a small
class, and paired with a ``ref_*`` torch twin it falls back to.
"""

from agentrt_kernels.cpu.build import KernelUnavailable
from agentrt_kernels.cpu.gguf_linear import GGUFLinear, ref_gguf_linear
from agentrt_kernels.cpu.quant_linear import (
    Q4Linear,
    Q8Linear,
    QuantWeight,
    dequantize,
    quantize,
    ref_quant_linear,
)

__all__ = ["GGUFLinear", "KernelUnavailable", "Q4Linear", "Q8Linear", "QuantWeight",
           "dequantize", "quantize", "ref_gguf_linear", "ref_quant_linear"]
