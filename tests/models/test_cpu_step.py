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


def test_a_file_whose_formats_take_both_paths_under_auto_steps_as_the_python_forward(
        tmp_path, monkeypatch):
    """With Q4_1 in the auto rule's table (its quality holds; the table waits for batch-
    invariant int8 kernels), ``gguf_activations="auto"`` runs Q4_1 on the integer path and
    Q5_1, a format no benchmark measured, on the exact one: one C++ step holds both kinds."""
    from agentrt.models import gguf_weights
    from agentrt.models.gguf_file import GGUFFile
    from agentrt.models.gguf_weights import GGUFWeights

    monkeypatch.setattr(gguf_weights, "AUTO_INT8_FORMATS", frozenset({"Q4_1"}))

    hf, arch, name = build("llama", **KQUANT_SIZED)
    path = write_gguf(hf, tmp_path / "llama.gguf", arch, name,
                      lambda t: _qtype("Q5_1" if ".ffn_" in t else "Q4_1"),
                      tokenizer=tiny_tokenizer)
    weights = GGUFWeights(GGUFFile(path), activations="auto")
    assert weights.linear(["model.layers.0.self_attn.o_proj.weight"]).activations == "int8"
    assert weights.linear(["model.layers.0.mlp.down_proj.weight"]).activations == "float32"
    fast, num_fast = _generate(path)
    eager, num_eager = _generate(path, enforce_eager=True)
    assert num_eager == 0 and num_fast >= 5
    for a, b in zip(fast, eager, strict=True):
        assert a.output_token_ids == b.output_token_ids


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


def _run(core: LLMEngine, prompts, max_tokens: int) -> list:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, logprobs=0)
    reqs = [core.add_request(p, params) for p in prompts]
    while core.has_unfinished():
        core.step()
    return reqs


def _q8_engine(tmp_path, **config) -> LLMEngine:
    hf, arch, name = build("llama", **KQUANT_SIZED)
    path = write_gguf(hf, tmp_path / "llama.gguf", arch, name, _qtype("Q8_0"),
                      tokenizer=tiny_tokenizer)
    return LLMEngine(EngineConfig(model=str(path), num_blocks=64, profile_on_start=False,
                                  **config))


def test_the_step_reports_what_each_thread_got_of_its_cpu(tmp_path):
    """The governor's observations (``agentrt.engine.cpu_threads``): the step's wall time, and
    per team thread its CPU time (at most the wall time) and its involuntary switches."""
    core = _q8_engine(tmp_path, num_threads=2)
    steps = core.runner.cpu_steps
    assert steps.step.vocab == core.model.lm_head.out_features  # the head runs in the step
    seen = []
    steps.governor.team = lambda limit: limit  # the whole team, whatever the machine's load
    steps.governor.observe = lambda *usage: seen.append(usage)
    _run(core, PROMPTS[:1], 6)
    assert len(seen) >= 4
    for wall, cpu, preempted in seen:
        assert 0 < wall < 10
        assert len(cpu) == len(preempted) == 2
        assert all(0 <= c <= wall + 2e-3 for c in cpu)
        assert all(p >= 0 and p == int(p) for p in preempted)
        assert cpu[0] > 0  # the calling thread ran the step


def test_every_team_size_gives_the_same_tokens_and_logprobs(tmp_path):
    """Rows are split between threads, never a sum: one thread or two, the same floats."""
    runs = {}
    for team in (1, 2):
        core = _q8_engine(tmp_path, num_threads=2)
        core.runner.cpu_steps.governor.team = lambda limit, team=team: team
        reqs = _run(core, PROMPTS[:2], 8)
        assert core.runner.cpu_steps.num_steps >= 5
        runs[team] = [(r.output_token_ids, r.logprobs) for r in reqs]
    assert runs[1] == runs[2]


def test_bad_team_sizes_and_buffers_are_refused(tmp_path):
    import torch

    step = _q8_engine(tmp_path).runner.cpu_steps.step
    args = (torch.zeros(1, step.hidden), torch.zeros(1, 64), torch.zeros(1, 64),
            torch.zeros(1, dtype=torch.int64), torch.zeros(1, 1, dtype=torch.int64),
            torch.ones(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        step.run(*args, num_threads=0)
    with pytest.raises(ValueError, match="usage must be"):
        step.run(*args, num_threads=2, usage=torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="logits must be"):
        step.run(*args, logits=torch.zeros(1, 7))


def test_fixed_threads_run_without_a_governor(tmp_path):
    core = _q8_engine(tmp_path, cpu_decode_threads="fixed")
    assert core.runner.cpu_steps.governor is None
    _run(core, PROMPTS[:1], 3)
    assert core.runner.cpu_steps.num_steps >= 2
