"""The sampler's logits-processor seam: called per sampled token with the segment's outputs."""

from __future__ import annotations

import torch

from agentrt import SamplingParams
from agentrt.core.request import Request
from agentrt.engine.sampler import sample


class BanAndRecord:
    """Bans tokens and records the output ids it was shown at each step."""

    def __init__(self, banned: set[int]) -> None:
        self.banned = sorted(banned)
        self.seen: list[list[int]] = []

    def __call__(self, output_token_ids: list[int], logits_row: torch.Tensor) -> torch.Tensor:
        self.seen.append(list(output_token_ids))
        logits_row[self.banned] = float("-inf")
        return logits_row


def test_processor_runs_before_greedy_and_sampling():
    logits = torch.tensor([[0.0, 5.0, 1.0], [0.0, 5.0, 1.0]])
    greedy = Request("g", [0], SamplingParams(logits_processor=BanAndRecord({1})))
    hot = Request("h", [0], SamplingParams(temperature=1.0, seed=0,
                                           logits_processor=BanAndRecord({1, 2})))
    assert sample(logits, [greedy, hot]) == ([2, 0], {})


def test_processor_sees_each_segment_from_its_start(engine, chat):
    free = engine.generate(chat("Count to five."), SamplingParams(max_tokens=6))
    banned = free.token_ids[1]
    proc = BanAndRecord({banned})
    out = engine.generate(chat("Count to five."),
                          SamplingParams(max_tokens=6, logits_processor=proc), keep_kv=True)
    assert banned not in out.token_ids and out.token_ids[0] == free.token_ids[0]
    assert proc.seen == [out.token_ids[:i] for i in range(len(out.token_ids))]
    proc2 = BanAndRecord(set())
    more = engine.resume(out.request_id, " Again:", SamplingParams(max_tokens=3,
                                                                    logits_processor=proc2),
                         keep_kv=False)  # NOTE: finish it; a paused request would hold KV
    assert proc2.seen == [more.token_ids[:i] for i in range(len(more.token_ids))]


def test_processor_is_not_part_of_params_equality():
    assert SamplingParams(logits_processor=BanAndRecord(set())) == SamplingParams()
