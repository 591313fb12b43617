"""RequestOptions: how one request is placed and controlled, beside how it decodes.

:class:`~agentrt.core.sampling_params.SamplingParams` says how tokens are chosen;
``RequestOptions`` says everything else the engine needs to know about a request — its id,
its prefix-cache namespace, its per-token hook, whether its KV outlives the segment, forced
tokens, a planned pause, and its place in a dataflow graph. Front ends build one object and
it travels unchanged down to :meth:`agentrt.LLMEngine.add_request`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrt.core.request import HookAction, Pause, Request

__all__ = ["Hook", "RequestOptions"]

Hook = Callable[["Request", list[int]], "HookAction | Pause | None"]
"""Sees each step's new tokens of a request; may answer "pause", "abort" or a Pause."""


@dataclass(frozen=True)
class RequestOptions:
    """Per-request options other than sampling (all optional).

    >>> engine.generate(prompt, params, RequestOptions(keep_kv=True, namespace="agent-1"))

    The public ``Engine`` calls also take these fields as keywords
    (``engine.generate(prompt, params, keep_kv=True)``), which build the same object.
    """

    request_id: str | None = None
    """Names the request (for ``abort`` / ``resume``); one is made up when None. Must be
    unique among the engine's live requests."""
    namespace: str = ""
    """Prefix-cache tenant: requests share cached prefixes only within one namespace."""
    hook: Hook | None = None
    """Called with each step's new tokens; may answer ``"pause"`` (end the segment, keep the
    KV), ``"abort"`` or a :class:`~agentrt.core.request.Pause` (None = continue)."""
    keep_kv: bool = False
    """When the segment ends, pause with the KV kept (resumable) instead of releasing it."""
    forced_token_ids: tuple[int, ...] = ()
    """Tokens that replace the sampled ones, one per step, in order (the forward pass still
    runs per token); sampling resumes when they run out."""
    pause: Pause | None = None
    """What the request will wait for when this segment ends (a tool kind and, if known, its
    expected seconds); implies ``keep_kv``."""
    group: str | None = None
    """The dataflow-graph query this request serves (topology-aware batching; None = alone)."""
    depth: int = 0
    """Its primitive's longest distance to the graph's sink: deeper goes first in its group."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "forced_token_ids", tuple(self.forced_token_ids))
        if self.request_id is not None and not isinstance(self.request_id, str):
            raise TypeError(f"request_id must be a string, got {self.request_id!r}")
        if not isinstance(self.depth, int) or self.depth < 0:
            raise ValueError(f"depth must be a non-negative integer, got {self.depth!r}")

    @property
    def keeps_kv(self) -> bool:
        """The KV outlives the segment (``keep_kv`` or a planned ``pause``)."""
        return self.keep_kv or self.pause is not None

    def updated(self, changes: Mapping[str, Any]) -> RequestOptions:
        """A copy with ``changes`` (field name → value); ``TypeError`` on an unknown name."""
        if not changes:
            return self
        unknown = sorted(set(changes) - _FIELD_NAMES)
        if unknown:
            raise TypeError(f"unknown request option(s) {', '.join(unknown)}; "
                            f"expected some of {', '.join(sorted(_FIELD_NAMES))}")
        return replace(self, **changes)

    @classmethod
    def of(cls, options: RequestOptions | None = None, **changes: Any) -> RequestOptions:
        """``options`` (or the defaults) with keyword ``changes`` applied."""
        return (options or cls()).updated(changes)


_FIELD_NAMES = frozenset(f.name for f in fields(RequestOptions))
