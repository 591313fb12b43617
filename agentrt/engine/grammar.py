"""A request's :class:`~agentrt.core.sampling_params.Grammar` → its logits processor.

The engine calls :func:`with_grammar_processor` when a request is added or resumed with new
params, so a grammar that does not compile is a ``ValueError`` at submit, never a failure
inside a step. xgrammar (:mod:`agentrt.constrained`) is imported only for requests that
carry a grammar.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agentrt.core.sampling_params import Grammar, LogitsProcessor, SamplingParams

__all__ = ["with_grammar_processor"]


def with_grammar_processor(params: SamplingParams, engine: Any) -> SamplingParams:
    """``params`` with ``logits_processor`` compiled from ``params.grammar`` for ``engine``
    (unchanged without a grammar); ``ValueError`` for a grammar that does not compile or
    for a grammar and a logits processor together."""
    if params.grammar is None:
        return params
    if params.logits_processor is not None:
        raise ValueError("set SamplingParams.grammar or logits_processor, not both")
    return replace(params, logits_processor=_processor(params.grammar, engine))


def _processor(grammar: Grammar, engine: Any) -> LogitsProcessor:
    try:
        from agentrt.constrained import get_grammar_backend
    except ImportError as exc:
        raise ValueError("grammar-constrained decoding needs xgrammar: "
                         "pip install 'agentrt[constrained]'") from exc
    backend = get_grammar_backend(engine)
    kind, spec = grammar.kind, grammar.spec
    if kind == "ebnf":
        return backend.ebnf(spec)
    if kind == "regex":
        return backend.regex(spec)
    try:
        value = json.loads(spec)
    except json.JSONDecodeError as exc:
        raise ValueError(f"a {kind} grammar's spec must be JSON text: {exc}") from exc
    if kind == "json_schema":
        return backend.json_schema(value)
    return backend.structural_tag(value)
