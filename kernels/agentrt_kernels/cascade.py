"""FlashInfer's ``MultiLevelCascadeAttentionWrapper`` arguments, and their torch twin.

:func:`cascade_plan_args` turns a :class:`~agentrt.attention.cascade.CascadeSplit` (level 0:
the pages a group of requests shares, one entry covering all of the group's query rows;
level 1: each request's own pages) into exactly what the wrapper's ``plan`` takes.
:func:`ref_cascade_attention` computes what the wrapper's ``run`` computes from the same
arguments: attention per level, then the log-sum-exp merge (:func:`ref_merge_state`, the twin
of ``flashinfer.merge_state``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrt.attention.cascade import CascadeSplit, merge_state
from agentrt_kernels.paged import HeadLayout, PlanArgs, PlanCall, flashinfer_plan_args, pinned
from agentrt_kernels.paged import ref_batch_prefill as _ref_level

__all__ = ["CascadePlanArgs", "cascade_plan_args", "ref_cascade_attention", "ref_merge_state"]

ref_merge_state = merge_state
"""Torch twin of ``flashinfer.merge_state(v_a, s_a, v_b, s_b)`` with natural-log LSEs."""


@dataclass(frozen=True)
class CascadePlanArgs:
    """Everything ``MultiLevelCascadeAttentionWrapper.plan`` takes for one step.

    The wrapper's query rows are the step's rows taken in ``row_order`` (None = as they are).
    """

    levels: tuple[PlanArgs, ...]  # shared pages first, per-request pages last
    row_order: torch.Tensor | None  # (T,) int64, on the cache's device

    def plan_call(self) -> PlanCall:
        """Arguments of ``MultiLevelCascadeAttentionWrapper.plan``.

        The wrapper applies ``causal`` to the last level only; earlier levels are not causal.
        """
        lvs = [p.level for p in self.levels]
        h, last = self.levels[-1].heads, lvs[-1]
        args = ([lv.qo_indptr for lv in lvs], [lv.kv_indptr for lv in lvs],
                [lv.kv_indices for lv in lvs], [lv.kv_last_page_len for lv in lvs],
                h.num_qo_heads, h.num_kv_heads, h.head_dim, last.page_size)
        return PlanCall(args, dict(causal=last.causal, sm_scale=h.sm_scale,
                                   q_data_type=h.dtype, kv_data_type=h.dtype))


def cascade_plan_args(split: CascadeSplit, heads: HeadLayout,
                      device: str | torch.device = "cpu") -> CascadePlanArgs:
    """The cascade wrapper's plan arguments for ``split``: the page tables on the host, where
    ``plan`` reads them (pinned when ``device`` is a GPU), the row order on ``device``."""
    pin = torch.device(device).type == "cuda"
    levels = tuple(flashinfer_plan_args(pinned(lv) if pin else lv, heads)
                   for lv in split.levels)
    order = None if split.row_order is None else split.row_order.to(device)
    return CascadePlanArgs(levels, order)


def ref_cascade_attention(q: torch.Tensor, paged_kv_cache: tuple[torch.Tensor, torch.Tensor],
                          plan: CascadePlanArgs) -> torch.Tensor:
    """Torch twin of the cascade wrapper's ``run(q, paged_kv_cache)``; ``q`` (T, H, D) in
    the wrapper's row order. Like the wrapper, the last level is causal, the others not."""
    *upper, bottom = plan.levels
    out, lse = _ref_level(q, paged_kv_cache, bottom)
    for level in upper:
        out, lse = ref_merge_state(out, lse, *_ref_level(q, paged_kv_cache, level, causal=False))
    return out.to(q.dtype)
