"""The weight arena (``agentrt.models.arena``): one buffer for a GGUF model's blocks, on huge
pages where the OS gives them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from gguf_models import KQUANT_SIZED, build, tiny_tokenizer, write_gguf

from agentrt.models.arena import HUGE_PAGE, WeightArena


def test_views_are_aligned_disjoint_and_the_overflow_gets_its_own_memory():
    arena = WeightArena(1000)
    a, b = arena.empty(3, 100), arena.empty(5, 7)
    assert a.shape == (3, 100) and b.shape == (5, 7) and a.dtype == b.dtype == torch.uint8
    assert a.is_contiguous() and b.is_contiguous()
    assert a.data_ptr() % HUGE_PAGE == 0 and b.data_ptr() % 64 == 0
    assert b.data_ptr() >= a.data_ptr() + 300  # disjoint
    a.fill_(1)
    b.fill_(2)
    assert int(a.sum()) == 300 and int(b.sum()) == 70
    big = arena.empty(10, 100)  # past the end: memory of its own
    assert big.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        WeightArena(-1)


def _thp_mode() -> str | None:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not path.exists():
        return None
    found = re.search(r"\[(\w+)\]", path.read_text())
    return found.group(1) if found else None


def _anon_huge_kb(address: int) -> int:
    """AnonHugePages of the mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            inside = int(head.group(1), 16) <= address < int(head.group(2), 16)
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"),
                    reason="the system gives no transparent huge pages")
def test_written_weights_sit_on_huge_pages():
    # memory a long process touched and freed, which an allocator could hand out again
    for size in (24 << 20, 20 << 20):
        torch.ones(size, dtype=torch.uint8).sum()
    found = []
    for _ in range(3):  # the kernel may have no free huge page at one moment
        arena = WeightArena(8 * HUGE_PAGE)
        assert arena.huge_pages
        view = arena.empty(8, HUGE_PAGE)
        view.fill_(7)
        found.append(_anon_huge_kb(view.data_ptr()))
        if found[-1] >= HUGE_PAGE // 1024:
            return
    pytest.fail(f"no huge page in three arenas (AnonHugePages kB: {found})")


def test_a_gguf_models_matrices_share_one_arena(tmp_path):
    import gguf

    from agentrt import EngineConfig, LLMEngine

    hf, arch, name = build("llama", **KQUANT_SIZED)
    path = write_gguf(hf, tmp_path / "llama.gguf", arch, name, gguf.GGMLQuantizationType.Q8_0,
                      tokenizer=tiny_tokenizer)
    model = LLMEngine(EngineConfig(model=str(path), num_blocks=16, profile_on_start=False)).model
    layer = model.layers[0]
    raws = [layer.o_proj.raw, layer.down.raw, model.lm_head.raw, model.embed.raw]
    storages = {t.untyped_storage().data_ptr() for t in raws}
    assert len(storages) == 1
    assert all(t.data_ptr() % 64 == 0 for t in raws)
