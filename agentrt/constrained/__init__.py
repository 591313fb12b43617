"""Grammar-constrained decoding: logits processors that keep the output inside a grammar.

The engine's seam is :attr:`SamplingParams.logits_processor
<agentrt.core.sampling_params.SamplingParams.logits_processor>`; this package fills it.
:func:`get_grammar_backend` returns the (cached) backend of an engine — xgrammar, the
``[constrained]`` / ``[langchain]`` extra — and the backend makes one processor per request::

    backend = get_grammar_backend(engine)
    params = SamplingParams(max_tokens=64, logits_processor=backend.json_schema(schema))

Nothing in :mod:`agentrt` imports this package; importing it imports xgrammar.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from agentrt.constrained.xgrammar_backend import GrammarLogitsProcessor, XGrammarBackend

__all__ = ["GrammarLogitsProcessor", "XGrammarBackend", "get_grammar_backend"]

_backends: weakref.WeakKeyDictionary[Any, XGrammarBackend] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def get_grammar_backend(engine: Any) -> XGrammarBackend:
    """The grammar backend for ``engine``'s tokenizer and vocabulary (built once per engine;
    an :class:`~agentrt.Engine` or an :class:`~agentrt.LLMEngine`)."""
    with _lock:
        backend = _backends.get(engine)
        if backend is None:
            info = engine.model_info
            backend = XGrammarBackend(engine.tokenizer, info.vocab_size, info.eos_token_ids)
            _backends[engine] = backend
        return backend
