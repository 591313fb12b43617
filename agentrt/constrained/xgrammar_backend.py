"""Grammar-constrained decoding with xgrammar: compile once per grammar, mask every step.

:class:`XGrammarBackend` holds xgrammar's tokenizer info and compiler for one engine's
tokenizer (compiled grammars are cached by xgrammar). Each request gets its own
:class:`GrammarLogitsProcessor`: a :class:`~agentrt.core.sampling_params.LogitsProcessor`
that advances a ``GrammarMatcher`` over the tokens it has not seen yet and masks the row
to the tokens the grammar allows next. The mask depends only on the tokens of the current
segment: a history that diverges from what the matcher saw (a reused processor, a rollback)
is replayed from the start, so the processor never masks against the wrong state.

A grammar or schema xgrammar cannot compile raises ``ValueError`` with xgrammar's reason
alone: its C++ log prefix (time, source file and line) is dropped, so no path of the build
machine reaches a client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import torch
import xgrammar as xgr

__all__ = ["GrammarLogitsProcessor", "XGrammarBackend"]

# NOTE: xgrammar's errors read "[16:54:04] /project/cpp/json_schema_converter.cc:4944: why"
_LOG_PREFIX = re.compile(r"\[[\d:.]+\]\s*\S+:\d+:\s*")
_CHECK_FAILED = re.compile(r"Check failed: \(.*?\) is false:\s*")
_SOURCE_PATH = re.compile(r"(?:/[\w.+-]+)+\.(?:cc|cpp|cxx|h|hpp|py)(?::\d+)?:?\s*")


class GrammarLogitsProcessor:
    """Masks one request's logits to what its grammar allows next (one object per request)."""

    def __init__(self, compiled: xgr.CompiledGrammar, vocab_size: int,
                 stop_token_ids: Iterable[int]) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.stop_token_ids = sorted(stop_token_ids)
        self.error: str | None = None
        """Why the output left the grammar (a forced token it rejects); then only EOS is left."""
        self._accepted: list[int] = []

    @property
    def is_terminated(self) -> bool:
        """The grammar is complete and its stop token was accepted."""
        return self.matcher.is_terminated()

    def __call__(self, output_token_ids: list[int], logits_row: torch.Tensor) -> torch.Tensor:
        self._advance(output_token_ids)
        if self.error is not None or self.matcher.is_terminated():
            return self._only_stop(logits_row)
        self.matcher.fill_next_token_bitmask(self.bitmask)
        xgr.apply_token_bitmask_inplace(logits_row, self.bitmask.to(logits_row.device))
        return logits_row

    def fill_bitmask(self, output_token_ids: list[int], bitmask: torch.Tensor,
                     index: int) -> bool:
        """Advance over ``output_token_ids`` and write the tokens allowed next into row
        ``index`` of ``bitmask`` (host int32, xgrammar's layout); False, writing nothing, when
        only the stop tokens are left (:meth:`__call__` would then keep only those)."""
        self._advance(output_token_ids)
        if self.error is not None or self.matcher.is_terminated():
            return False
        self.matcher.fill_next_token_bitmask(bitmask, index)
        return True

    @staticmethod
    def apply_batch(logits: torch.Tensor,
                    rows: list[tuple[int, GrammarLogitsProcessor, list[int]]]
                    ) -> dict[int, Exception]:
        """What calling each processor on its row of ``logits`` (N, vocab) does, for ``rows``
        of (row index, processor, output token ids), with the bitmasks of all rows moved to
        the logits' device in one copy (pinned on CUDA) and applied by one call. Returns the
        rows whose processor raised (their logits are left as they were)."""
        errors: dict[int, Exception] = {}
        words = max(proc.bitmask.shape[-1] for _, proc, _ in rows)
        bitmask = torch.full((logits.shape[0], words), -1, dtype=torch.int32,
                             pin_memory=logits.device.type == "cuda")
        masked = []
        for i, proc, token_ids in rows:
            try:
                if proc.fill_bitmask(token_ids, bitmask, i):
                    masked.append(i)
                else:
                    proc._only_stop(logits[i])
            except Exception as exc:  # noqa: BLE001 - one request's fault stays its own
                errors[i] = exc
        if masked:
            xgr.apply_token_bitmask_inplace(
                logits, bitmask.to(logits.device, non_blocking=True), indices=masked)
        return errors

    def _advance(self, token_ids: list[int]) -> None:
        n = len(self._accepted)
        if token_ids[:n] != self._accepted:  # NOTE: not the history we matched: replay it
            self.matcher.reset()
            self._accepted, self.error, n = [], None, 0
        for token in token_ids[n:]:
            if self.error is None and not self.matcher.accept_token(token):
                self.error = f"token {token} at output position {len(self._accepted)} " \
                             "is not allowed by the grammar"
            self._accepted.append(token)

    def _only_stop(self, row: torch.Tensor) -> torch.Tensor:
        keep = row[self.stop_token_ids].clone()
        row.fill_(float("-inf"))
        row[self.stop_token_ids] = keep
        return row


class XGrammarBackend:
    """xgrammar for one tokenizer: compiles grammars and makes per-request processors."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int],
                 *, max_threads: int = 2) -> None:
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids)
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=self.stop_token_ids)
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=max_threads)

    def processor(self, compiled: xgr.CompiledGrammar) -> GrammarLogitsProcessor:
        """A fresh processor (own matcher) for one request."""
        return GrammarLogitsProcessor(compiled, self.vocab_size, self.stop_token_ids)

    def structural_tag(self, tag: dict[str, Any]) -> GrammarLogitsProcessor:
        """A processor for an xgrammar structural tag (``{"type": "structural_tag", ...}``)."""
        return self.processor(_compile(self.compiler.compile_structural_tag, json.dumps(tag)))

    def json_schema(self, schema: dict[str, Any]) -> GrammarLogitsProcessor:
        """JSON matching ``schema``, written as ``json.dumps`` would (one line, ``", "``)."""
        compiled = _compile(self.compiler.compile_json_schema, json.dumps(schema),
                            any_whitespace=False)
        return self.processor(compiled)

    def json_object(self) -> GrammarLogitsProcessor:
        """Any JSON value (JSON mode)."""
        return self.processor(self.compiler.compile_builtin_json_grammar())

    def regex(self, pattern: str) -> GrammarLogitsProcessor:
        """A processor for a regular expression (the whole output matches it)."""
        return self.processor(_compile(self.compiler.compile_regex, pattern))

    def ebnf(self, grammar: str, *, root_rule_name: str = "root") -> GrammarLogitsProcessor:
        """A processor for a GBNF/EBNF grammar (llama.cpp syntax)."""
        compiled = _compile(self.compiler.compile_grammar, grammar,
                            root_rule_name=root_rule_name)
        return self.processor(compiled)


def _compile(compile: Callable[..., xgr.CompiledGrammar], *args: Any,
             **kwargs: Any) -> xgr.CompiledGrammar:
    """``compile(*args, **kwargs)``; ``ValueError`` (with a clean reason) if it fails."""
    try:
        return compile(*args, **kwargs)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ValueError(_reason(exc)) from exc


def _reason(exc: BaseException) -> str:
    """xgrammar's reason for ``exc``, without its log prefix, its C++ assertion or any
    source-file path."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = _LOG_PREFIX.sub("", lines[0]) if lines else ""
    text = _SOURCE_PATH.sub("", _CHECK_FAILED.sub("", text)).strip()
    return text or f"the grammar could not be compiled ({type(exc).__name__})"
