"""llama.cpp (llama-cpp-python, the ``[bench]`` extra) as the benchmarks run it: one place for
the options every ``Llama`` gets and for greedy generation from a fresh context.

Imported lazily by the scripts that compare with llama.cpp (it is optional).
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any


def llama_options(**kwargs: Any) -> dict[str, Any]:
    """``kwargs`` for ``Llama(...)`` (or ``ChatLlamaCpp``'s ``model_kwargs``), plus
    ``use_extra_bufts=False`` where this llama-cpp-python has the option: the stock build's AMX
    buffer path segfaults on these machines."""
    from llama_cpp import Llama

    if "use_extra_bufts" in inspect.signature(Llama.__init__).parameters:
        kwargs.setdefault("use_extra_bufts", False)
    return kwargs


def open_llama(path: str | Path, **kwargs: Any):
    """A quiet ``llama_cpp.Llama`` on the GGUF file at ``path``, with :func:`llama_options`."""
    from llama_cpp import Llama

    return Llama(**llama_options(model_path=str(path), verbose=False, **kwargs))


def greedy(llm, prompt: Sequence[int], max_tokens: int, eos: Collection[int] = ()) -> list[int]:
    """Greedy tokens for ``prompt`` from a fresh context (no reuse of an earlier prompt's KV):
    ``max_tokens`` of them, or fewer ending with an ``eos`` id (kept, as agentrt keeps it)."""
    llm.reset()
    out: list[int] = []
    for token in llm.generate(list(prompt), top_k=1, temp=0.0, repeat_penalty=1.0):
        out.append(token)  # the generator never stops on EOS by itself
        if token in eos or len(out) == max_tokens:
            break
    return out
