"""Every tensor the engine owns lives on the configured device; the device options resolve
and fail as documented.

The walk starts at the engine core and follows agentrt's own objects and plain containers
(not the tokenizer, not FlashInfer's wrappers or CUDA graphs, which own their buffers): the
weights, the KV pool, the host pool, the attention backend's plan of the last step, the decode
graphs' fixed inputs and each live request's sampling generator. The same test runs on CUDA
under the ``gpu`` marker.
"""

from __future__ import annotations

from collections import deque

import pytest
import torch

from agentrt import SamplingParams
from agentrt.config import EngineConfig
from agentrt.engine.llm_engine import LLMEngine

CUDA = pytest.param("cuda", marks=[
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])


def owned_tensors(root: object) -> dict[str, torch.Tensor | torch.Generator]:
    """Path → tensor (or generator) for everything reachable from ``root`` through
    agentrt objects, dicts, lists, tuples, sets and deques (each object once)."""
    found: dict[str, torch.Tensor | torch.Generator] = {}
    seen: set[int] = set()
    stack: list[tuple[str, object]] = [("engine", root)]
    while stack:
        path, obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor | torch.Generator):
            found[path] = obj
        elif isinstance(obj, dict):
            stack += [(f"{path}[{k!r}]", v) for k, v in obj.items()]
        elif isinstance(obj, list | tuple | set | frozenset | deque):
            stack += [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
        elif type(obj).__module__.startswith("agentrt"):
            attrs = dict(getattr(obj, "__dict__", {}))
            for cls in type(obj).__mro__:
                attrs.update({s: getattr(obj, s) for s in getattr(cls, "__slots__", ())
                              if hasattr(obj, s)})
            stack += [(f"{path}.{k}", v) for k, v in attrs.items()]
    return found


def _engine(device: str, tiny_model: str, backend: str = "auto") -> LLMEngine:
    if device == "cpu":  # bookkeeping only: the 2-layer model
        config = EngineConfig(model=tiny_model, device="cpu", num_blocks=64, block_size=4,
                              host_kv_cache_gb=0.01, profile_on_start=False,
                              attention_backend=backend)
    else:  # FlashInfer's kernels need the real model's head size (64)
        config = EngineConfig(device=device, num_blocks=256, host_kv_cache_gb=0.05,
                              max_num_seqs=8)
    return LLMEngine(config)


@pytest.mark.parametrize("device, backend", [("cpu", "auto"), ("cpu", "flashinfer"),
                                             pytest.param(*CUDA.values, "auto", marks=CUDA.marks)])
def test_every_engine_tensor_is_on_the_configured_device(device, backend, tiny_model):
    """(cpu, flashinfer): FlashInfer's plan on its torch twins, the census's CPU check of what
    the CUDA run walks."""
    core = _engine(device, tiny_model, backend)
    want = torch.device(core.config.resolved_device)
    assert core.device == want
    sampled = core.add_request("The weather today is", SamplingParams(
        max_tokens=40, temperature=0.8, seed=7, ignore_eos=True))
    core.add_request("Once upon a time", SamplingParams(max_tokens=40, ignore_eos=True))
    for _ in range(4):  # a prefill step, then decode steps
        core.step()
    assert sampled.generator is not None

    host = core.kv.host
    owned = owned_tensors(core)
    on_host = {p for p, t in owned.items() if t is host.k or t is host.v}
    assert len(on_host) == 2
    misplaced = {p: t.device for p, t in owned.items()
                 if p not in on_host and t.device != want}
    assert not misplaced, misplaced
    for t in (host.k, host.v):
        assert t.device.type == "cpu"
        assert t.is_pinned() == (want.type == "cuda")

    reached = {id(t) for t in owned.values()}
    model = core.model
    for t in (model.embed.weight, model.cos, model.layers[0].qkv.weight,
              model.layers[-1].down.weight, core.kv_tensors.k, core.kv_tensors.v,
              sampled.generator):
        assert id(t) in reached
    # the step's attention plan: the torch twins keep the slot mapping, FlashInfer its
    # append indices (a CUDA-graph decode step reads fixed buffers beside them)
    plan = "._append[0]" if core.backend.name.startswith("flashinfer") else "._slot_mapping"
    assert any(p.endswith(plan) for p in owned), sorted(owned)
    core.abort(sampled.request_id)


def test_auto_resolves_to_todays_cpu_choices_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    c = EngineConfig()
    assert (c.device, c.resolved_device, c.resolved_dtype) == ("auto", "cpu", "float32")
    assert c.resolved_attention_backend == "cpu"  # the default GGUF's blocks: fused ops
    assert EngineConfig(quantization="none").resolved_attention_backend == "torch"
    assert EngineConfig(quantization="int8").resolved_attention_backend == "cpu"


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_gpu_is_a_clear_error(device):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    config = EngineConfig(device=device)  # valid config: it may be meant for another machine
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        _ = config.resolved_device


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CPU", "", "mps"])
def test_unknown_device_is_refused(device):
    with pytest.raises(ValueError, match="unknown device"):
        EngineConfig(device=device)


@pytest.mark.parametrize("option", [dict(quantization="int8"), dict(quantization="int4"),
                                    dict(fused_ops=True), dict(attention_backend="cpu")])
def test_cpu_only_options_on_cuda_are_refused(option):
    with pytest.raises(ValueError, match="CPU kernels only"):
        EngineConfig(device="cuda", **option)
    assert EngineConfig(device="auto", **option).resolved_device == "cpu"


def test_cuda_graph_batch_sizes_cover_max_num_seqs():
    assert EngineConfig(max_num_seqs=64).cuda_graph_batch_sizes == (
        1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert EngineConfig(max_num_seqs=5).cuda_graph_batch_sizes == (1, 2, 4, 8)
    assert EngineConfig(max_num_seqs=1).cuda_graph_batch_sizes == (1,)
    assert EngineConfig(max_num_seqs=1000).cuda_graph_batch_sizes[-1] == 256
    assert EngineConfig(enforce_eager=True).cuda_graph_batch_sizes == ()


def test_cli_takes_device_for_run_and_serve():
    from agentrt.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["run", "--device", "cuda:1", "hi"]).device == "cuda:1"
    assert parser.parse_args(["serve", "--device", "cpu"]).device == "cpu"
    assert parser.parse_args(["run", "hi"]).device == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--device", "gpu", "hi"])

