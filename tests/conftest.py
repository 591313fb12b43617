"""Shared fixtures: one real engine on the default model for the whole session; random paged
batches shaped like the engine's (scattered pages, shared prefix pages)."""

from __future__ import annotations

import random

import pytest
import torch

from agentrt import Engine
from agentrt.attention import AttentionMetadata, KVCacheTensors


@pytest.fixture(scope="session")
def engine():
    """The real SmolLM2-135M-Instruct on agentrt's engine, shared by all tests: the default
    configuration (its GGUF's own Q4_1 layers on the path the ``gguf_activations="auto"``
    rule gives)."""
    eng = Engine(dtype="float32")
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def exact_engine(engine):
    """The default model on the exact path (``gguf_activations="float32"``: its Q4_1 values
    dequantized exactly, float32 activations), for tests whose claim is transformers' outputs
    or batch invariance: :func:`engine` itself while the auto rule runs Q4_1 exactly, else an
    engine of its own (one model load)."""
    from agentrt.models.gguf_weights import AUTO_INT8_FORMATS

    if "Q4_1" not in AUTO_INT8_FORMATS:
        yield engine
        return
    eng = Engine(dtype="float32", gguf_activations="float32", kv_cache_gb=0.25,
                 profile_on_start=False)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def tokenizer(engine):
    return engine.tokenizer


@pytest.fixture(scope="session")
def chat(tokenizer):
    """Render a one-turn chat prompt with the model's own template."""

    def render(question: str, system: str | None = None) -> str:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": question})
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    return render


@pytest.fixture(scope="session")
def long_text() -> str:
    """Real English prose (standard-library docstrings), long enough for 600+ token prompts."""
    import collections
    import json
    import textwrap

    parts = [textwrap.dedent(m.__doc__ or "") for m in (json, collections, textwrap)]
    return "\n".join(parts)


@pytest.fixture(scope="session")
def tiny_model(engine, tmp_path_factory) -> str:
    """A 2-layer randomly initialised Llama with the default model's tokenizer: agentrt's
    real code paths at a fraction of the cost, for tests about bookkeeping, not outputs."""
    import shutil

    import torch
    import transformers

    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, vocab_size=49152)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(engine.core.model_path / name, folder / name)
    return str(folder)


def build_batch(rng: random.Random, specs: list[tuple[int, str | None]], page_size: int = 4,
                num_pages: int = 128) -> AttentionMetadata:
    """Metadata for sequences ``specs`` = [(q_len, group)]; group None = shares nothing.

    The sequences of a group start on the group's prefix pages, as the radix cache hands
    them out, each on as many as its cached context covers; every other page is drawn at
    random, so page ids are scattered and last-page lengths vary.
    """
    free = list(range(num_pages))
    rng.shuffle(free)
    prefixes: dict[str, list[int]] = {}
    qo, kv_ptr, indices, last, slots = [0], [0], [], [], []
    for q_len, group in specs:
        own: list[int] = []
        cached = rng.randint(0, 13)
        if group is not None:
            prefix = prefixes.setdefault(group, [free.pop() for _ in range(3)])
            cached = rng.randint(2 * page_size, 5 * page_size)
            own = prefix[: cached // page_size]
        total = cached + q_len
        pages = own + [free.pop() for _ in range(-(-total // page_size) - len(own))]
        indices += pages
        qo.append(qo[-1] + q_len)
        kv_ptr.append(kv_ptr[-1] + len(pages))
        last.append(total - (len(pages) - 1) * page_size)
        slots += [pages[p // page_size] * page_size + p % page_size for p in range(cached, total)]
    i32 = torch.int32
    return AttentionMetadata(torch.tensor(qo, dtype=i32), torch.tensor(kv_ptr, dtype=i32),
                             torch.tensor(indices, dtype=i32), torch.tensor(last, dtype=i32),
                             torch.tensor(slots, dtype=torch.int64), page_size)


@pytest.fixture
def make_batch():
    return build_batch


def random_cache(pages: int, page_size: int, kv_heads: int, head_dim: int, *, layers: int = 1,
                 dtype: torch.dtype = torch.float32, device: str = "cpu") -> KVCacheTensors:
    """A paged KV cache filled with normal noise (what stale pages hold)."""
    kv = KVCacheTensors.allocate(layers, pages, page_size, kv_heads, head_dim, dtype, device)
    kv.k.normal_()
    kv.v.normal_()
    return kv


def random_qkv(meta: AttentionMetadata, heads: int, kv_heads: int, head_dim: int
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random float32 q, k, v for the step ``meta`` describes (one row per new token)."""
    t = int(meta.qo_indptr[-1])
    return (torch.randn(t, heads, head_dim), torch.randn(t, kv_heads, head_dim),
            torch.randn(t, kv_heads, head_dim))


@pytest.fixture
def make_cache():
    return random_cache


@pytest.fixture
def make_qkv():
    return random_qkv


@pytest.fixture(scope="session")
def sglang_server(tmp_path_factory, request):
    """A real ``agentrt serve`` (the embedded model) on a free loopback port, speaking SGLang's
    native API, started once per test session (the in-process engine loads meanwhile)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
    from serve_harness import launch, stop, wait_healthy

    server = launch(tmp_path_factory.mktemp("sglang-server") / "serve.log")
    try:
        request.getfixturevalue("engine")
        wait_healthy(server)
        yield server
    finally:
        stop(server.process)


@pytest.fixture(params=["local", "sglang"])
def backend(request):
    """Each test that takes it runs twice: on the ``local`` backend (the session's engine) and
    on the ``sglang`` backend pointed at :func:`sglang_server` (same model, greedy-equal)."""
    from agentrt.backends import get_backend

    if request.param == "local":
        yield get_backend("local", engine=request.getfixturevalue("engine"))
        return
    server = request.getfixturevalue("sglang_server")
    with get_backend("sglang", url=server.url, timeout=120) as remote:
        yield remote
