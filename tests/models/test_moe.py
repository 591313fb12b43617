"""Mixture-of-experts models (Qwen3-MoE, Qwen2-MoE): tiny random models (8 experts, top-2) as
Hugging Face folders and as GGUF files (F32, Q8_0, Q4_K, kept in their blocks) match
transformers token for token and logprob for logprob; routing edge cases (ties in the router's
scores, every token choosing the same expert, an expert chosen by none) match transformers'
router and the torch twin of the expert dispatch; a batch decodes as each sequence alone.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from gguf_models import IDS, reference
from moe_models import KQUANT_MOE, build_moe, write_moe_gguf

from agentrt import Engine, SamplingParams

IDS_SMALL = [i % 500 for i in IDS]  # the tiny tokenizer's 512 tokens
STEPS = 6

pytestmark = pytest.mark.usefixtures("private_cache")  # see conftest.py


def qtype(name: str):
    import gguf

    return gguf.GGMLQuantizationType[name]


def generate(path, ids, activations: str = "float32", **config):
    engine = Engine(str(path), num_blocks=64, max_num_batched_tokens=64,
                    gguf_activations=activations, profile_on_start=False, **config)
    try:
        out = engine.generate(ids, SamplingParams(max_tokens=STEPS, ignore_eos=True,
                                                  logprobs=0))
        return out, engine
    finally:
        engine.close()


def check(out, hf, ids, tolerance: float = 1e-3) -> None:
    tokens, logprobs = reference(hf, ids, STEPS)
    assert out.token_ids == tokens
    for step, token in enumerate(tokens):
        assert abs(out.logprobs[step][token] - float(logprobs[step, token])) < tolerance


@pytest.mark.parametrize("case", ["qwen3moe", "qwen2moe"])
def test_a_hf_folder_matches_transformers(case, tmp_path, engine):
    hf = build_moe(case)
    hf.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(engine.core.model_path / name, tmp_path / name)
    out, moe_engine = generate(tmp_path, IDS)
    assert moe_engine.core.model_config.moe.num_experts == 8
    check(out, hf, IDS)


@pytest.mark.parametrize(("case", "fmt"), [("qwen3moe", "F32"), ("qwen3moe", "Q8_0"),
                                           ("qwen3moe", "Q4_K"), ("qwen2moe", "Q8_0")])
def test_a_gguf_runs_in_its_own_blocks_and_matches_transformers(case, fmt, tmp_path):
    from agentrt_kernels.cpu.gguf_linear import GGUFLinear

    hf = build_moe(case, **KQUANT_MOE)
    path = write_moe_gguf(hf, tmp_path / f"{case}.gguf", case,
                          None if fmt == "F32" else qtype(fmt), sync=True)
    out, engine = generate(path, IDS_SMALL)
    assert engine.config.resolved_quantization == "gguf"
    moe = engine.core.model.layers[0].moe
    assert isinstance(moe.gate_up[7], GGUFLinear) and moe.gate_up[7].shape == (512, 256)
    assert engine.core.runner.cpu_steps is None  # the fused C step falls back for experts
    check(out, hf, IDS_SMALL)


def test_a_gguf_converted_to_float_matches_transformers(tmp_path):
    """quantization="none": the stacked experts dequantized into safetensors, sliced per
    expert."""
    hf = build_moe("qwen2moe", **KQUANT_MOE)
    path = write_moe_gguf(hf, tmp_path / "qwen2moe.gguf", "qwen2moe")
    out, engine = generate(path, IDS_SMALL, quantization="none", dtype="float32")
    assert engine.config.resolved_quantization == "none"
    check(out, hf, IDS_SMALL)


@pytest.fixture(scope="module")
def q8_moe(tmp_path_factory):
    """A Qwen3-MoE Q8_0 file, and transformers on its values. Its routers are decisive (weights
    x30): a near-tie between two experts' scores would let a float rounding difference upstream
    (8-bit activations move by whole grid steps) choose another expert."""
    hf = build_moe("qwen3moe", **KQUANT_MOE)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.mlp.gate.weight.mul_(30)
    path = tmp_path_factory.mktemp("moe") / "qwen3moe-q8_0.gguf"
    return write_moe_gguf(hf, path, "qwen3moe", qtype("Q8_0"), sync=True), hf


def test_the_integer_activation_path_runs_the_experts(q8_moe, monkeypatch):
    """gguf_activations="int8" (llama.cpp's integer dot products) on every expert: the engine
    gives the greedy tokens of the same model on the integer path's torch twin."""
    from agentrt_kernels.cpu import gguf_linear

    path, _ = q8_moe
    got, engine = generate(path, IDS_SMALL, activations="int8")
    assert engine.core.model.layers[1].moe.down[0].activations == "int8"
    with monkeypatch.context() as patch:
        patch.setattr(gguf_linear, "_kernel", lambda: None)
        want, twin = generate(path, IDS_SMALL, activations="int8")
    assert twin.core.model.layers[1].moe.down[0]._kernel is None
    assert got.token_ids == want.token_ids
    for step, token in enumerate(want.token_ids):
        assert abs(got.logprobs[step][token] - want.logprobs[step][token]) < 0.02


def test_a_batch_decodes_as_each_sequence_alone(q8_moe):
    path, _ = q8_moe
    prompts = [IDS_SMALL[:40], IDS_SMALL[10:60], IDS_SMALL[5:25]]
    engine = Engine(str(path), num_blocks=64, max_num_batched_tokens=64, profile_on_start=False)
    try:
        params = SamplingParams(max_tokens=STEPS, ignore_eos=True)
        together = engine.generate(prompts, params)
        alone = [engine.generate(p, params) for p in prompts]
        assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    finally:
        engine.close()


def test_tied_router_scores_choose_as_transformers(tmp_path):
    """Layer 0's router is all zeros: every expert ties for every token."""
    hf = build_moe("qwen3moe", **KQUANT_MOE)
    with torch.no_grad():
        hf.model.layers[0].mlp.gate.weight.zero_()
    path = write_moe_gguf(hf, tmp_path / "tied.gguf", "qwen3moe")
    out, _ = generate(path, IDS_SMALL)
    check(out, hf, IDS_SMALL)


def test_route_is_transformers_router_with_ties():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    from agentrt_kernels.cpu.moe import route

    hf = build_moe("qwen3moe")
    router = Qwen3MoeTopKRouter(hf.config)
    with torch.no_grad():
        router.weight.copy_(torch.randn(8, 64))
        router.weight[3] = router.weight[5]  # experts 3 and 5 tie everywhere
        router.weight[6] = router.weight[5]
    h = torch.randn(9, 64)
    h[4] = 0  # all eight tie
    for normalize in (True, False):
        router.norm_topk_prob = normalize
        _, weights, ids = router(h)
        got = route(torch.nn.functional.linear(h, router.weight), 2, normalize)
        assert torch.equal(got.ids, ids) and torch.equal(got.weights, weights)


@pytest.mark.parametrize("choice", ["mixed", "all_one_expert", "one_token"])
def test_expert_dispatch_equals_its_torch_twin(choice):
    """GGUFLinear experts (Q8_0 blocks) grouped by expert equal transformers' one-hot loop on
    the dequantized weights: every token on one expert, experts chosen by no token, batch 1."""
    import gguf

    from agentrt_kernels.cpu.gguf_linear import GGUFLinear
    from agentrt_kernels.cpu.moe import Routing, experts_forward, ref_experts_forward

    torch.manual_seed(0)
    experts, hidden, inter, tokens = 8, 64, 32, 12
    q8 = gguf.GGMLQuantizationType.Q8_0

    def stacked(rows, cols):
        raw = gguf.quants.quantize(torch.randn(experts * rows, cols).numpy() * 0.1, q8)
        values = gguf.quants.dequantize(raw, q8).reshape(experts, rows, cols)
        raw = torch.from_numpy(raw).view(experts, rows, -1)
        return [GGUFLinear(raw[e], q8, (rows, cols)) for e in range(experts)], \
            torch.from_numpy(values)

    gate_up, gate_up_w = stacked(2 * inter, hidden)
    down, down_w = stacked(hidden, inter)
    if choice == "one_token":
        tokens = 1
    h = torch.randn(tokens, hidden)
    ids = torch.stack([torch.randperm(5)[:2] for _ in range(tokens)])  # experts 5-7: unused
    if choice == "all_one_expert":
        ids[:, 0] = 2
        ids[:, 1] = torch.where(ids[:, 1] == 2, 4, ids[:, 1])
    weights = torch.softmax(torch.randn(tokens, 2), -1)
    routing = Routing(weights, ids)
    got = experts_forward(h, routing, gate_up, down)
    want = ref_experts_forward(h, routing, gate_up_w, down_w)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
