"""Shared-prefix (cascade) attention: split a batch into a shared level and a per-request level.

Requests that start on the same physical pages (the radix cache hands a cached prompt prefix
to every request that matches it) attend to those pages once, as a group: level 0 holds one
entry per group (all of the group's query rows, the shared pages, no causal mask, since the
shared tokens precede every query) and level 1 holds each request's own remaining pages
(causal). The two partial results are merged with the log-sum-exp rule (:func:`merge_state`).

The levels are laid out exactly as FlashInfer's ``MultiLevelCascadeAttentionWrapper.plan``
takes them (one ``qo_indptr`` / ``kv_indptr`` / ``kv_indices`` / ``kv_last_page_len`` per
level), so the torch backend and the FlashInfer backend run the same split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrt.attention.base import AttentionMetadata

__all__ = ["CascadeSplit", "PagedLevel", "merge_state", "split_cascade"]


@dataclass(frozen=True)
class PagedLevel:
    """One level of paged KV: entry ``i`` is query rows ``qo_indptr[i]:qo_indptr[i+1]``
    attending to pages ``kv_indices[kv_indptr[i]:kv_indptr[i+1]]`` (int32 tensors).

    An entry may have no pages (``kv_last_page_len`` 0): its rows get an empty state.
    """

    qo_indptr: torch.Tensor  # (N + 1,)
    kv_indptr: torch.Tensor  # (N + 1,)
    kv_indices: torch.Tensor  # (num_pages_used,)
    kv_last_page_len: torch.Tensor  # (N,)
    page_size: int
    causal: bool

    @classmethod
    def from_metadata(cls, meta: AttentionMetadata) -> PagedLevel:
        """The one causal level of a step without cascade."""
        return cls(meta.qo_indptr, meta.kv_indptr, meta.kv_indices, meta.kv_last_page_len,
                   meta.page_size, causal=True)

    @property
    def num_entries(self) -> int:
        return self.qo_indptr.numel() - 1

    def to(self, device: str | torch.device) -> PagedLevel:
        """The same level with its tensors on ``device``."""
        move = dict(device=device, non_blocking=True)
        return PagedLevel(self.qo_indptr.to(**move), self.kv_indptr.to(**move),
                          self.kv_indices.to(**move), self.kv_last_page_len.to(**move),
                          self.page_size, self.causal)

    def kv_lens(self) -> torch.Tensor:
        """KV length of every entry (0 for an entry without pages)."""
        pages = self.kv_indptr[1:] - self.kv_indptr[:-1]
        return torch.where(pages > 0, (pages - 1) * self.page_size + self.kv_last_page_len, 0)


@dataclass(frozen=True)
class CascadeSplit:
    """A step's batch as two levels over the same query rows, taken in ``row_order``.

    Row ``j`` of both levels is row ``row_order[j]`` of the step's flattened batch (None =
    the batch order): the members of a group are made adjacent so each group covers one
    contiguous range of level-0 query rows.
    """

    row_order: torch.Tensor | None  # (T,) int64
    # NOTE: a lone request gets a level-0 entry without pages, because each level's
    # qo_indptr must cover every row; its empty state (LSE -inf) is neutral in the merge.
    shared: PagedLevel  # level 0: one entry per group or lone request, not causal
    unique: PagedLevel  # level 1: one entry per request, causal
    num_groups: int

    @property
    def levels(self) -> tuple[PagedLevel, PagedLevel]:
        return self.shared, self.unique


def split_cascade(meta: AttentionMetadata, min_shared_pages: int = 1) -> CascadeSplit | None:
    """Split ``meta`` into shared and per-request levels; None when no two requests share.

    Requests are grouped by their first page; a group shares its longest common run of
    leading pages, capped so that every shared page lies wholly before the group's query
    tokens (they are context, already written, and need no causal mask).
    """
    qo, kv_ptr = meta.qo_indptr.tolist(), meta.kv_indptr.tolist()
    pages = [meta.kv_indices[kv_ptr[i] : kv_ptr[i + 1]].tolist() for i in range(meta.num_seqs)]
    q_lens = [qo[i + 1] - qo[i] for i in range(meta.num_seqs)]
    context_pages = [(n - q) // meta.page_size
                     for n, q in zip(meta.kv_lens().tolist(), q_lens, strict=True)]
    groups = _shared_groups(pages, context_pages, min_shared_pages)
    if not groups:
        return None
    order = _sequence_order(meta.num_seqs, groups)
    shared_of = {i: n for members, n in groups for i in members}
    rows = [r for i in order for r in range(qo[i], qo[i + 1])]
    row_order = None if rows == list(range(len(rows))) else torch.tensor(rows)
    last = meta.kv_last_page_len.tolist()
    unique = _level([[i] for i in order], [pages[i][shared_of.get(i, 0) :] for i in order],
                    [last[i] for i in order], q_lens, meta.page_size, causal=True)
    units, unit_pages, unit_last = _shared_units(order, groups, pages, meta.page_size)
    shared = _level(units, unit_pages, unit_last, q_lens, meta.page_size, causal=False)
    return CascadeSplit(row_order, shared, unique, num_groups=len(groups))


def _shared_groups(pages: list[list[int]], context_pages: list[int],
                   min_pages: int) -> list[tuple[list[int], int]]:
    """(members, shared page count) of every group of two or more requests."""
    by_first: dict[int, list[int]] = {}
    for i, p in enumerate(pages):
        if context_pages[i] >= 1:
            by_first.setdefault(p[0], []).append(i)
    groups = []
    for members in by_first.values():
        n = min(context_pages[i] for i in members)
        first = pages[members[0]]
        for i in members[1:]:
            n = next((k for k in range(n) if pages[i][k] != first[k]), n)
        if len(members) >= 2 and n >= min_pages:
            groups.append((members, n))
    return groups


def _sequence_order(num_seqs: int, groups: list[tuple[list[int], int]]) -> list[int]:
    """Batch order, except that each group's members follow its first member."""
    group_of = {i: members for members, _ in groups for i in members}
    order, seen = [], set()
    for i in range(num_seqs):
        if i not in seen:
            members = group_of.get(i, [i])
            order.extend(members)
            seen.update(members)
    return order


def _shared_units(order: list[int], groups, pages, page_size: int):
    """Level-0 entries: one per group (its shared pages) or lone request (no pages)."""
    shared_of = {members[0]: (members, n) for members, n in groups}
    in_group = {i for members, _ in groups for i in members}
    units, unit_pages, unit_last = [], [], []
    for i in order:
        if i in shared_of:
            members, n = shared_of[i]
            units.append(members)
            unit_pages.append(pages[i][:n])
            unit_last.append(page_size)
        elif i not in in_group:
            units.append([i])
            unit_pages.append([])
            unit_last.append(0)
    return units, unit_pages, unit_last


def _level(units: list[list[int]], unit_pages: list[list[int]], last: list[int],
           q_lens: list[int], page_size: int, causal: bool) -> PagedLevel:
    qo, kv_ptr = [0], [0]
    for members, p in zip(units, unit_pages, strict=True):
        qo.append(qo[-1] + sum(q_lens[i] for i in members))
        kv_ptr.append(kv_ptr[-1] + len(p))
    i32 = torch.int32
    indices = [page for p in unit_pages for page in p]
    return PagedLevel(torch.tensor(qo, dtype=i32), torch.tensor(kv_ptr, dtype=i32),
                      torch.tensor(indices, dtype=i32), torch.tensor(last, dtype=i32),
                      page_size, causal)


def merge_state(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor,
                s_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attention states: outputs (T, H, D) and natural-log LSEs (T, H).

    The result is attention over the union of both KV sets. An empty state (LSE -inf) is
    neutral; two empty states merge to (0, -inf).
    """
    s = torch.logaddexp(s_a, s_b)  # (T, H)
    safe = torch.where(torch.isinf(s), 0.0, s)
    w_a = torch.exp(s_a - safe).unsqueeze(-1)  # (T, H, 1)
    w_b = torch.exp(s_b - safe).unsqueeze(-1)
    return (v_a * w_a + v_b * w_b).to(v_a.dtype), s
