"""Swapping KV pages to the host pool and back preserves them bit for bit.

The CPU case checks the page-run copies of the CUDA path (page-major host pool, one copy per
run of consecutive host pages) on CPU tensors; the ``gpu`` case runs the side-stream copier
between a CUDA pool and a pinned host pool, and the engine's own swap path on CUDA.
"""

from __future__ import annotations

import random

import pytest
import torch

from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.kvcache.transfer import (
    CudaPageCopier,
    PageCopier,
    copy_from_host,
    copy_to_host,
    make_copier,
    page_runs,
)

L, P, PAGE, KVH, D = 3, 40, 4, 2, 8
CUDA = pytest.param("cuda", marks=[
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])


def test_page_runs_split_on_gaps():
    assert [(r.entries, r.pages) for r in page_runs([5, 6, 7, 2, 9, 10])] == [
        (slice(0, 3), slice(5, 8)), (slice(3, 4), slice(2, 3)), (slice(4, 6), slice(9, 11))]
    assert page_runs([]) == []


def _pools(device: str, dtype=torch.bfloat16):
    dev = KVCacheTensors.allocate(L, P, PAGE, KVH, D, dtype, device)
    dev.k.normal_()
    dev.v.normal_()
    host = KVCacheTensors.allocate_host(L, P, PAGE, KVH, D, dtype,
                                        pin_memory=device == "cuda")
    return dev, host


def _pages(kv: KVCacheTensors, pages: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.tensor(pages)
    return kv.k.cpu()[:, idx], kv.v.cpu()[:, idx]


def _scattered(rng: random.Random, n: int, exclude: set[int] = frozenset()) -> list[int]:
    pages = [p for p in range(P) if p not in exclude]
    start = rng.randrange(len(pages) - n)  # a run, then scattered pages
    return pages[start : start + n // 2] + rng.sample(pages[:start] + pages[start + n // 2 :],
                                                      n - n // 2)


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_swap_round_trip_is_bit_exact(device):
    rng = random.Random(0)
    dev, host = _pools(device)
    assert host.is_page_major and not dev.is_page_major
    copier = make_copier(dev, host)
    assert isinstance(copier, CudaPageCopier if device == "cuda" else PageCopier)
    src = _scattered(rng, 12)
    held = _pages(dev, src)
    host_pages = _scattered(rng, 12)
    if device == "cpu":  # the CUDA path's page-run copies, on CPU tensors
        copy_to_host(dev, host, src, host_pages)
    else:
        copier.swap_out(dev, host, src, host_pages)
        copier.synchronize()
    for a, b in zip(_pages(host, host_pages), held, strict=True):
        assert torch.equal(a, b)
    dev.k.normal_()  # the device pages are reused meanwhile
    dev.v.normal_()
    back = _scattered(rng, 12)
    if device == "cpu":
        copy_from_host(host, dev, host_pages, back)
    else:
        copier.swap_in(host, dev, host_pages, back)
        torch.cuda.current_stream().synchronize()  # swap_in orders the compute stream
    for a, b in zip(_pages(dev, back), held, strict=True):
        assert torch.equal(a, b)


def _token_kv(core, req, n: int) -> torch.Tensor:
    """K and V of ``req``'s first ``n`` tokens, all layers, on the CPU."""
    bs = core.config.block_size
    slots = torch.tensor([req.block_table[t // bs] * bs + t % bs for t in range(n)])
    kv = core.kv_tensors
    return torch.stack([kv.k.flatten(1, 2)[:, slots], kv.v.flatten(1, 2)[:, slots]]).cpu()


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_engine_swap_round_trip(device, tiny_model):
    """A paused request swapped to the host pool (pinned on CUDA) comes back with its KV
    bit for bit, and continues exactly as one whose KV stayed on the device."""
    from agentrt import SamplingParams
    from agentrt.config import EngineConfig
    from agentrt.engine.llm_engine import LLMEngine

    model = tiny_model if device == "cpu" else None
    core = LLMEngine(EngineConfig(model=model, device=device, num_blocks=256,
                                  host_kv_cache_gb=0.05, interception_handling="preserve",
                                  profile_on_start=False))
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    outputs = {}
    for swap in (False, True):
        req = core.add_request("The three primary colours are", params, keep_kv=True,
                               request_id=f"r{swap}", namespace=f"ns{swap}")
        while core.has_unfinished():
            core.step()
        n = req.num_computed_tokens
        kept = _token_kv(core, req, n)
        if swap:
            core.move_kv(req.request_id, "swap")
            assert core.kv.is_swapped(req) and not req.block_table
        core.resume(req.request_id, " and", params)
        core.step()
        assert not core.kv.is_swapped(req)
        assert torch.equal(_token_kv(core, req, n), kept)
        while core.has_unfinished():
            core.step()
        outputs[swap] = req.output_token_ids
        core.release(req.request_id)
    assert outputs[True] == outputs[False]


class _Copy:
    """A copy in flight (what ``torch.cuda.Event`` is to the manager): done when told."""

    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done


class _AsyncCopier(PageCopier):
    """Copies at once but reports them in flight, as the side-stream copier does."""

    def __init__(self) -> None:
        self.copies: list[_Copy] = []
        self.num_waits = 0

    def swap_out(self, device, host, src_pages, dst_pages):
        super().swap_out(device, host, src_pages, dst_pages)
        self.copies.append(_Copy())
        return self.copies[-1]

    def synchronize(self) -> None:
        self.num_waits += 1
        for c in self.copies:
            c.done = True


def test_swapped_out_pages_stay_allocated_until_their_copy_completes():
    from agentrt.core.request import Request
    from agentrt.core.sampling_params import SamplingParams
    from agentrt.kvcache.manager import KVCacheManager

    dev = KVCacheTensors.allocate(1, 8, PAGE, KVH, D, torch.float32)
    host = KVCacheTensors.allocate_host(1, 8, PAGE, KVH, D, torch.float32)
    copier = _AsyncCopier()
    kv = KVCacheManager(dev, host, enable_prefix_cache=False, copier=copier)
    req = Request("r", list(range(3 * PAGE)), SamplingParams())
    assert kv.allocate(req, 3 * PAGE)
    req.num_computed_tokens = 3 * PAGE
    pages = list(req.block_table)
    kv.swap_out(req)
    assert kv.pool.num_free == 5 and kv.num_free_blocks == 8  # held while copying
    assert all(kv.pool.ref_count(p) == 1 for p in pages)
    kv.reap()
    assert kv.pool.num_free == 5  # still copying
    copier.copies[0].done = True
    kv.reap()
    assert kv.pool.num_free == 8 and copier.num_waits == 0

    other = Request("o", list(range(8 * PAGE)), SamplingParams())
    assert kv.swap_in(req)
    kv.swap_out(req)  # in flight again: a request that needs every page waits for it
    assert kv.allocate(other, 8 * PAGE) and copier.num_waits == 1
