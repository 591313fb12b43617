"""The engine on a CUDA GPU: greedy tokens against Hugging Face transformers on the same GPU,
FlashInfer against the torch backend in the engine, and ``agentrt serve --device cuda``.

Every test here is marked ``gpu`` and skipped without CUDA (``pytest -m gpu`` selects them).
The device placement test, the swap round trip and CUDA-graph decode live next to their CPU
twins (test_device.py, test_swap_transfer.py, test_cuda_graph.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from agentrt import SamplingParams
from agentrt.config import EngineConfig
from agentrt.engine.llm_engine import LLMEngine

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

NEW_TOKENS = 24
PROMPTS = ["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
           "def fibonacci(n):\n    ", "The three laws of thermodynamics are"]
BF16_MARGIN = 0.5
"""bfloat16: our token must be within this many logits of HF's best at every position (a
near-tie may break either way under different kernels); float32 must match exactly."""


def _generate(core: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    reqs = [core.add_request(ids, SamplingParams(max_tokens=NEW_TOKENS)) for ids in prompts]
    while core.has_unfinished():
        core.step()
    return [r.output_token_ids for r in reqs]


@pytest.fixture(scope="module")
def hf_path():
    core = LLMEngine(EngineConfig(device="cpu", num_blocks=16, profile_on_start=False))
    return core.model_path, [core.encode(p) for p in PROMPTS]


@pytest.mark.parametrize("dtype, backend", [("float32", "torch"), ("bfloat16", "auto"),
                                            ("bfloat16", "torch")])
def test_greedy_tokens_match_hf_on_cuda(hf_path, dtype, backend):
    from transformers import AutoModelForCausalLM

    path, prompts = hf_path
    core = LLMEngine(EngineConfig(device="cuda", dtype=dtype, attention_backend=backend,
                                  num_blocks=512, max_num_seqs=8))
    ours = _generate(core, prompts)
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype))
    hf = hf.to("cuda").eval()
    for ids, out in zip(prompts, ours, strict=True):
        with torch.inference_mode():
            if dtype == "float32":
                ref = hf.generate(torch.tensor([ids], device="cuda"),
                                  max_new_tokens=NEW_TOKENS, do_sample=False)
                assert out == ref[0, len(ids):].tolist()[: len(out)]
                continue
            # bfloat16: teacher-forced on our tokens, each must be (nearly) HF's argmax
            logits = hf(torch.tensor([ids + out], device="cuda")).logits[0].float()
        rows = logits[len(ids) - 1 : len(ids) - 1 + len(out)]
        chosen = rows.gather(1, torch.tensor(out, device="cuda")[:, None])[:, 0]
        assert (rows.max(-1).values - chosen).max().item() <= BF16_MARGIN


def test_flashinfer_engine_equals_torch_backend_engine():
    pytest.importorskip("flashinfer")
    outs = []
    for backend in ("flashinfer", "flashinfer_cascade", "torch"):
        core = LLMEngine(EngineConfig(device="cuda", dtype="float16", num_blocks=512,
                                      attention_backend=backend, enforce_eager=True))
        shared = core.encode("You are a helpful assistant. Answer briefly. " * 8)
        prompts = [shared + core.encode(q) for q in ("Hi!", "What is 2+2?", "Name a colour.")]
        outs.append(_generate(core, [prompts[0]]) + _generate(core, prompts))
    # float16 with different kernels: compare the first tokens, where drift has not built up
    assert [o[:4] for o in outs[0]] == [o[:4] for o in outs[2]]
    assert [o[:4] for o in outs[1]] == [o[:4] for o in outs[2]]


def test_serve_on_cuda(tmp_path):
    pytest.importorskip("fastapi")
    import openai

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from serve_harness import start_server

    with start_server(tmp_path / "serve.log", "--device", "cuda") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0,
                               timeout=120)
        reply = client.chat.completions.create(
            model=client.models.list().data[0].id, max_tokens=16, temperature=0,
            messages=[{"role": "user", "content": "Say hello."}])
        assert reply.choices[0].message.content
        assert reply.usage.completion_tokens > 0
        chunks = list(client.chat.completions.create(
            model=reply.model, max_tokens=8, stream=True,
            messages=[{"role": "user", "content": "Count to three."}]))
        assert any(c.choices and c.choices[0].delta.content for c in chunks)
