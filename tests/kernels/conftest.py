"""Random paged batches shaped like the engine's: scattered pages, shared prefix pages."""

from __future__ import annotations

import random

import pytest
import torch

from agentrt.attention import AttentionMetadata


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
