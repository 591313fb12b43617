"""agentrt's kernels: thin wrappers (FlashInfer on GPU, and more), each paired with a ``ref_*``
torch twin that runs on CPU over exactly the same arguments.

This ``__init__`` imports nothing, and no module here imports a GPU library at import time:
:mod:`agentrt_kernels.flashinfer_backend` imports ``flashinfer`` only when a backend is built
with it. The attention registry in :mod:`agentrt.attention` names these modules, so a CPU
install never loads them unless they are chosen.

Attention (FlashInfer):

- :mod:`agentrt_kernels.paged` — the plan / append arguments of FlashInfer's paged wrappers,
  built from agentrt's metadata, and their torch references.
- :mod:`agentrt_kernels.cascade` — the arguments of ``MultiLevelCascadeAttentionWrapper`` and
  its reference (per-level attention merged by log-sum-exp).
- :mod:`agentrt_kernels.flashinfer_backend` — ``FlashInferBackend`` behind the attention
  backend interface.

CPU decode (:mod:`agentrt_kernels.cpu`): weight-only 8- and 4-bit linear layers (GGUF's Q8_0 /
Q4_1 group forms) built from C++ on first use, chosen with ``EngineConfig(quantization=...)``.
"""
