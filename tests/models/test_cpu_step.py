"""Decode steps as one C++ call (``agentrt.engine.cpu_step``) equal the Python forward pass.

Each family's small GGUF file (Llama; Qwen2 with QKV biases; Qwen3 with per-head q/k norms; a
Q4_K_M-style mix whose fused QKV is two formats side by side) is run twice on the same
prompts — once with every decode step through the C++ step, once with ``enforce_eager=True``
(the Python forward for every step) — with several sequences of different lengths, one of them
arriving while the others decode (so mixed prefill/decode steps fall back to Python between C++
steps). Greedy tokens must be equal and every step's logprob equal within float32 summation
order; the C++ path must actually have run.
"""

from __future__ import annotations

import pytest
from gguf_models import KQUANT_SIZED, build, tiny_tokenizer, write_gguf

from agentrt import EngineConfig, LLMEngine, SamplingParams

PROMPTS = [[(7 * i + 3 * j) % 500 for j in range(n)] for i, n in enumerate((9, 30, 17))]


pytestmark = pytest.mark.usefixtures("private_cache")  # see conftest.py


def _qtype(name: str):
    import gguf

    return gguf.GGMLQuantizationType[name]


def _q4_k_m(name: str):
    return _qtype("Q6_K" if name.split(".")[-2] in ("attn_v", "ffn_down", "output") else "Q4_K")


def _generate(path, **config):
    core = LLMEngine(EngineConfig(model=str(path), num_blocks=64, max_num_batched_tokens=64,
                                  profile_on_start=False, **config))
    params = SamplingParams(max_tokens=8, ignore_eos=True, logprobs=0)
    reqs = [core.add_request(p, params) for p in PROMPTS[:2]]
    for _ in range(3):
        core.step()
    reqs.append(core.add_request(PROMPTS[2], params))  # arrives while the others decode
    while core.has_unfinished():
        core.step()
    steps = core.runner.cpu_steps
    if "gguf_activations" in config:  # the path asked for is the one that ran
        assert core.model.layers[0].o_proj.activations == config["gguf_activations"]
    return reqs, (steps.num_steps if steps is not None else 0)


@pytest.mark.parametrize("case,formats", [("llama", "Q4_K"), ("qwen2", "Q8_0"),
                                          ("qwen3", "Q6_K"), ("llama", "q4_k_m")])
@pytest.mark.parametrize("activations", ["float32", "int8"])
def test_decode_steps_in_one_call_equal_the_python_forward(case, formats, activations,
                                                            tmp_path):
    extra = dict(head_dim=64) if case == "qwen3" else {}
    hf, arch, name = build(case, **{**KQUANT_SIZED, **extra})
    kind = _q4_k_m if formats == "q4_k_m" else _qtype(formats)
    path = write_gguf(hf, tmp_path / f"{case}.gguf", arch, name, kind, tokenizer=tiny_tokenizer)
    config = {"gguf_activations": activations}
    fast, num_fast = _generate(path, **config)
    eager, num_eager = _generate(path, enforce_eager=True, **config)
    assert num_eager == 0 and num_fast >= 5
    for a, b in zip(fast, eager, strict=True):
        assert a.output_token_ids == b.output_token_ids
        for step, token in enumerate(a.output_token_ids):
            assert abs(a.logprobs[step][token] - b.logprobs[step][token]) < 1e-4


def test_models_it_cannot_run_keep_the_python_forward(tmp_path):
    hf, arch, name = build("llama", **KQUANT_SIZED)
    path = write_gguf(hf, tmp_path / "llama.gguf", arch, name, _qtype("Q8_0"),
                      tokenizer=tiny_tokenizer)
    _, num = _generate(path, quantization="none")  # float weights: torch's matmuls
    assert num == 0


def test_a_layer_whose_shapes_disagree_keeps_the_python_forward(tmp_path):
    """The C step computes with the first layer's sizes and reads weights through pointers: a
    layer whose projection has another shape (here layer 1's O takes the gate/up weights) must
    not be handed to it (it would read past the weights), the same model whole must be."""
    from agentrt.engine.cpu_step import CpuDecodeSteps

    hf, arch, name = build("llama", **KQUANT_SIZED)
    path = write_gguf(hf, tmp_path / "llama.gguf", arch, name, _qtype("Q8_0"),
                      tokenizer=tiny_tokenizer)
    core = LLMEngine(EngineConfig(model=str(path), num_blocks=64, profile_on_start=False))
    model, backend = core.model, core.runner.backend
    assert CpuDecodeSteps.build(model, backend) is not None
    layer = model.layers[1]
    layer.o_proj, kept = layer.gate_up, layer.o_proj
    try:
        assert CpuDecodeSteps.build(model, backend) is None
    finally:
        layer.o_proj = kept
