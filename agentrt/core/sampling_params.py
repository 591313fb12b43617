"""SamplingParams: how one request decodes. Validated on construction."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, get_args

if TYPE_CHECKING:
    import torch

__all__ = ["MAX_SEED", "MIN_SEED", "Grammar", "GrammarKind", "LogitsProcessor", "SamplingParams",
           "check_seed"]

_GREEDY_BELOW = 1e-5
MIN_SEED = -(2**63)
MAX_SEED = 2**63 - 1
"""Seeds are signed 64-bit integers (vLLM's range for OpenAI's ``seed``); torch's generators
take them all."""


class LogitsProcessor(Protocol):
    """Masks or reshapes one request's next-token logits (e.g. grammar-constrained decoding).

    The sampler calls it once per sampled token, before greedy or random choice, with the
    tokens generated so far in the current segment and that request's logits row (vocab,).
    It may modify the row in place and returns the row to sample from. It is stateful per
    request: one object per request, never shared between requests.

    A class may also define a static ``apply_batch(logits, rows)`` (``rows``: (row index,
    processor, output token ids) each; returns the rows that raised): the sampler then hands
    it all of that class's rows of a step at once (the grammar processor moves one bitmask to
    the device for all of them).
    """

    def __call__(self, output_token_ids: list[int], logits_row: torch.Tensor) -> torch.Tensor: ...


GrammarKind = Literal["ebnf", "structural_tag", "json_schema", "regex"]


@dataclass(frozen=True)
class Grammar:
    """A constraint on the output, as data: it travels over the wire (SGLang's sampling
    params take ``ebnf`` / ``structural_tag`` / ``json_schema`` / ``regex``) and the local
    engine compiles it (xgrammar) into the request's logits processor when it is added.

    ``spec`` is the grammar text: GBNF/EBNF, a regular expression, or JSON text for a JSON
    schema or an xgrammar structural tag. A grammar that does not compile is a
    ``ValueError`` when the request is submitted.
    """

    kind: GrammarKind
    spec: str

    def __post_init__(self) -> None:
        if self.kind not in get_args(GrammarKind):
            raise ValueError(f"grammar kind must be one of {', '.join(get_args(GrammarKind))}, "
                             f"got {self.kind!r}")
        if not isinstance(self.spec, str) or not self.spec:
            raise ValueError("a grammar's spec must be a non-empty string")


@dataclass(frozen=True)
class SamplingParams:
    """Decoding options of one request; frozen, compared and hashed by value (without
    ``logits_processor`` and ``extra``), copyable and picklable (without a processor).

    ``temperature`` below 1e-5 is greedy. Stop strings are matched on the decoded text across
    token boundaries and are not part of the returned text; ``stop_token_ids`` end the
    request on those ids (the model's EOS ids always do unless ``ignore_eos``).

    Where vLLM's ``SamplingParams`` differs, on purpose:

    - one completion per request: no ``n`` / ``best_of`` (submit the prompt n times, with
      different seeds);
    - ``max_tokens`` defaults to 256 (vLLM's ``LLM``: 16) and is never None (pass
      ``engine.max_model_len`` to run to the end of the context);
    - a stop string is never in the text (no ``include_stop_str_in_output``), while a
      ``stop_token_ids`` token that is not special stays in it (vLLM drops its text);
    - no ``min_tokens``, ``repetition_penalty`` or ``presence_penalty``: a
      :attr:`logits_processor` does any of them;
    - ``None`` for ``stop`` / ``stop_token_ids`` means none, as in vLLM.
    """

    max_tokens: int = 256
    """Most tokens to generate in this call (fewer when the context fills first)."""
    temperature: float = 0.0
    """0 (or below 1e-5, as vLLM) = greedy (argmax); above, samples from the tempered
    distribution."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off; vLLM's and SGLang's -1 is taken as 0)."""
    top_p: float = 1.0
    """Keep the smallest set of tokens whose probability reaches p (1 = off)."""
    seed: int | None = None
    """Seed of this request's own generator (sampling only), in [MIN_SEED, MAX_SEED];
    None = nondeterministic."""
    stop: tuple[str, ...] = ()
    """Strings that end generation; not included in the output text."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end generation, in addition to the model's EOS."""
    ignore_eos: bool = False
    """Keep generating past the model's EOS token."""
    logprobs: int | None = None
    """Return the sampled token's log-probability and this many top alternatives (at most
    the vocabulary; None = none), as vLLM: each step's dict holds ``logprobs`` or
    ``logprobs + 1`` entries."""
    skip_special_tokens: bool = True
    """Leave special tokens (e.g. ``<|im_end|>``) out of the returned text."""
    logits_processor: LogitsProcessor | None = field(default=None, compare=False, hash=False)
    """Called on this request's logits row before sampling (see :class:`LogitsProcessor`);
    for in-process users. Front ends that may run remotely set :attr:`grammar` instead."""
    grammar: Grammar | None = None
    """Keep the output inside this grammar (the engine makes the logits processor)."""
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    """Free-form options for layers above the engine (ignored by the engine)."""

    def __post_init__(self) -> None:
        stop = () if self.stop is None else (self.stop,) if isinstance(self.stop, str) \
            else self.stop
        object.__setattr__(self, "stop", _as_tuple(stop, "stop must be a string or a list "
                                                         "of strings"))
        ids = () if self.stop_token_ids is None else self.stop_token_ids
        object.__setattr__(self, "stop_token_ids", _as_tuple(ids, "stop_token_ids must be a "
                                                                  "list of token ids"))
        if self.extra is None:
            object.__setattr__(self, "extra", {})
        if not _is_int(self.max_tokens) or self.max_tokens <= 0:
            hint = " (for vLLM's None, up to the context, pass engine.max_model_len)" \
                if self.max_tokens is None else ""
            raise ValueError(f"max_tokens must be a positive integer, got "
                             f"{_short(self.max_tokens)}{hint}")
        for name in ("temperature", "top_p", "top_k"):
            value = getattr(self, name)
            kind = numbers.Integral if name == "top_k" else numbers.Real
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{name} must be {'an integer' if name == 'top_k' else 'a number'}"
                                 f", got {_short(value)}")
        if not 0 <= self.temperature < math.inf:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be >= 0 (or -1, vLLM's 'off'), got {self.top_k}")
        object.__setattr__(self, "top_k", max(0, int(self.top_k)))
        self._check_stops()
        if self.logprobs is not None and (not _is_int(self.logprobs) or self.logprobs < 0):
            raise ValueError(f"logprobs must be None or an integer >= 0, got "
                             f"{_short(self.logprobs)}")
        for name in ("ignore_eos", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {_short(getattr(self, name))}")
        if not isinstance(self.extra, dict):
            raise ValueError(f"extra must be a dict, got {_short(self.extra)}")
        check_seed(self.seed)
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            raise TypeError(f"grammar must be a Grammar, got {type(self.grammar).__name__}")

    def _check_stops(self) -> None:
        wrong = [s for s in self.stop if not isinstance(s, str)]
        if wrong:
            raise ValueError(f"stop must be a string or a list of strings, got "
                             f"{_short(wrong[0])} ({type(wrong[0]).__name__}) in it")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if any(not _is_int(t) or t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be token ids (integers >= 0), got "
                             f"{_short(list(self.stop_token_ids))}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def is_greedy(self) -> bool:
        """Argmax decoding: a temperature below 1e-5 (vLLM's threshold), where dividing the
        logits by it could overflow."""
        return self.temperature < _GREEDY_BELOW


def check_seed(seed: object, name: str = "seed") -> None:
    """Raise ``ValueError`` unless ``seed`` is None or a signed 64-bit integer."""
    if seed is None:
        return
    if not isinstance(seed, int) or isinstance(seed, bool) or not MIN_SEED <= seed <= MAX_SEED:
        raise ValueError(f"{name} must be an integer in [-2**63, 2**63 - 1] (a signed 64-bit "
                         f"integer), got {_short(seed)}")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _as_tuple(value: object, expected: str) -> tuple:
    """``value`` (any iterable but a string) as a tuple, else ``ValueError(expected)``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{expected}, got {_short(value)}")
    return tuple(value)


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
