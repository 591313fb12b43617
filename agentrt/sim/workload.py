"""Requests of the interception simulator: InferCept's Table 1 mixture, and their state in flight.

A request is a prompt followed by segments: each segment decodes some tokens and then (except
the last) stops for an interception of a kind and a duration, after which the tool's
observation tokens are appended to the context.

Table 1 of InferCept gives, per augmentation, the interception duration, the number of
interceptions per request and the context length, each as (mean, spread). We read the spread
as a standard deviation (LAMPS's restatement of the same table says std; a *variance* of 738
tokens² would be a spread of 27 tokens, implausible for GSM8K prompts) and sample normals
clipped to sensible ranges. The context length is taken as the context at a request's last
interception; it grows linearly from the prompt (half of it), and each round's growth is split
evenly between decoded output and the tool's observation. The final answer decodes as many
tokens as one round. Kinds are sampled uniformly, arrivals are Poisson.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentrt.intercept.waste import Strategy

__all__ = [
    "TABLE1", "Augmentation", "RequestSpec", "Segment", "SimRequest", "table1_requests",
]

PROMPT_SHARE = 0.5
"""Share of the context at the last interception that is the prompt."""
OUTPUT_SHARE = 0.5
"""Share of each round's context growth that the model decodes (the rest is observation)."""


@dataclass(frozen=True)
class Segment:
    """Decode ``decode_len`` tokens, then (if ``kind``) pause for ``duration`` seconds."""

    decode_len: int
    kind: str | None = None
    """Interception that ends the segment; None for the request's last segment."""
    duration: float = 0.0
    observation_len: int = 0
    """Tokens the tool returns, appended to the context when the request resumes."""


@dataclass(frozen=True)
class RequestSpec:
    request_id: str
    arrival_time: float
    prompt_len: int
    segments: tuple[Segment, ...]

    @property
    def output_len(self) -> int:
        return sum(s.decode_len for s in self.segments)


@dataclass(frozen=True)
class Augmentation:
    """One row of InferCept's Table 1: (mean, std) of each quantity."""

    kind: str
    duration: tuple[float, float]
    """Seconds per interception."""
    num_calls: tuple[float, float]
    """Interceptions per request."""
    context_len: tuple[float, float]
    """Context tokens at the last interception."""


TABLE1: tuple[Augmentation, ...] = (
    Augmentation("math", (9e-5, 6e-5), (3.75, 1.3), (1422, 738)),
    Augmentation("qa", (0.69, 0.17), (2.52, 1.73), (1846, 428)),
    Augmentation("ve", (0.09, 0.014), (28.18, 15.2), (2185, 115)),
    Augmentation("chatbot", (28.6, 15.6), (4.45, 1.96), (753, 703)),
    Augmentation("image", (20.03, 7.8), (6.91, 3.93), (1247, 792)),
    Augmentation("tts", (17.24, 7.6), (6.91, 3.93), (1251, 792)),
)


def table1_requests(rate: float, duration: float, seed: int = 0, duration_scale: float = 1.0,
                    max_context_len: int = 4096) -> list[RequestSpec]:
    """Poisson arrivals at ``rate`` req/s for ``duration`` seconds, kinds uniform over Table 1;
    interception durations multiplied by ``duration_scale``."""
    rng = random.Random(seed)
    specs: list[RequestSpec] = []
    t = rng.expovariate(rate)
    while t < duration:
        aug = rng.choice(TABLE1)
        specs.append(_sample_request(rng, f"r{len(specs)}", t, aug, duration_scale,
                                     max_context_len))
        t += rng.expovariate(rate)
    return specs


def _sample_request(rng: random.Random, request_id: str, arrival: float, aug: Augmentation,
                    duration_scale: float, max_context_len: int) -> RequestSpec:
    num_calls = max(1, round(rng.gauss(*aug.num_calls)))
    context_len = min(max_context_len, max(64, round(rng.gauss(*aug.context_len))))
    prompt_len = max(16, round(context_len * PROMPT_SHARE))
    growth = max(2, (context_len - prompt_len) // num_calls)
    decode_len = max(1, round(growth * OUTPUT_SHARE))
    segments = [Segment(decode_len, aug.kind, _duration(rng, aug, duration_scale),
                        growth - decode_len) for _ in range(num_calls)]
    segments.append(Segment(decode_len))
    return RequestSpec(request_id, arrival, prompt_len, tuple(segments))


def _duration(rng: random.Random, aug: Augmentation, scale: float) -> float:
    return max(0.0, rng.gauss(*aug.duration)) * scale


class SimRequest:
    """A request in flight in the simulator; also the ``Job`` (:mod:`.policies`) and ``Paused``
    (:mod:`.handling`) views the production policies read."""

    def __init__(self, spec: RequestSpec, fixed: Strategy | None) -> None:
        self.spec = spec
        self.job_id = spec.request_id
        self.arrival_time = self.enqueue_time = spec.arrival_time
        self.strategy = fixed
        self.seg_idx = self.seg_generated = self.num_output = 0
        self.num_tokens = spec.prompt_len
        """Context length: prompt, observations and sampled tokens (the last has no KV yet)."""
        self.num_computed = 0
        """Tokens of KV on the device."""
        self.num_host = 0
        """Tokens of KV swapped out to the host."""
        self.max_computed = 0
        """Most tokens of KV it ever had: computing below this mark is recomputing."""
        self.is_paused = self.swap_sync = False
        self.held_as = Strategy.PRESERVE
        """Where the current interception keeps the KV."""
        self.pause_time = self.elapsed = self.intercepted = 0.0
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.predicted_interception: float | None = None
        self.expected_duration: float | None = None

    @property
    def segment(self) -> Segment:
        return self.spec.segments[self.seg_idx]

    @property
    def kind(self) -> str:
        return self.segment.kind or ""

    @property
    def context_len(self) -> int:
        """KV held, for a paused request; the whole context, for a waiting one."""
        return self.num_computed if self.is_paused else self.num_tokens

    @property
    def predicted_output(self) -> int:
        return self.segment.decode_len - self.seg_generated

    @property
    def predicted_after(self) -> int:
        segs = self.spec.segments
        return segs[self.seg_idx + 1].decode_len if self.seg_idx + 1 < len(segs) else 0

    @property
    def num_pending(self) -> int:
        return self.num_tokens - self.num_computed

    def num_recompute(self, num_tokens: int) -> int:
        """How many of the next ``num_tokens`` to compute had been computed before."""
        return max(0, min(num_tokens, self.max_computed - self.num_computed))
