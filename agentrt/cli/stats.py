"""``--verbose`` (``--stats``): Ollama's timing block for one answer, on stderr.

The numbers follow llama.cpp's (and so Ollama's) split: *prompt eval* is the prompt's
prefill up to the first answer token (the prompt tokens the prefix cache already held are
not counted in it, and are reported beside it); *eval* is every answer token after the first,
one decode step each.
"""

from __future__ import annotations

import sys
import time

from agentrt.core.outputs import StreamDelta

__all__ = ["AnswerTiming"]


class AnswerTiming:
    """Times one streamed answer: :meth:`see` each delta, then :meth:`report`."""

    def __init__(self, load_s: float = 0.0) -> None:
        self.load_s = load_s
        """Seconds spent loading the model before this answer (0 once it is loaded)."""
        self.start = time.perf_counter()
        self.first: float | None = None
        self.last = self.start
        self.tokens = 0
        self.prompt_tokens = self.cached_tokens = 0

    def see(self, delta: StreamDelta) -> StreamDelta:
        """Count ``delta`` (returned unchanged, to use inside a loop)."""
        now = time.perf_counter()
        if delta.token_ids and self.first is None:
            self.first = now
        self.tokens += len(delta.token_ids)
        self.prompt_tokens = max(self.prompt_tokens, delta.num_prompt_tokens)
        self.cached_tokens = max(self.cached_tokens, delta.num_cached_tokens)
        self.last = now
        return delta

    def report(self) -> str:
        """Ollama's ``--verbose`` block (durations as it prints them)."""
        first = self.first if self.first is not None else self.last
        computed = self.prompt_tokens - self.cached_tokens
        prompt_s, eval_s, evals = first - self.start, self.last - first, max(self.tokens - 1, 0)
        lines = [("total duration", _duration(self.load_s + self.last - self.start)),
                 ("load duration", _duration(self.load_s)),
                 ("prompt eval count", f"{computed} token(s)")]
        if self.cached_tokens:
            lines.append(("prompt cached", f"{self.cached_tokens} token(s)"))
        lines += [("prompt eval duration", _duration(prompt_s)),
                  ("prompt eval rate", _rate(computed, prompt_s)),
                  ("eval count", f"{evals} token(s)"),
                  ("eval duration", _duration(eval_s)),
                  ("eval rate", _rate(evals, eval_s))]
        return "\n".join(f"{name + ':':<22}{value}" for name, value in lines)

    def print(self) -> None:
        """:meth:`report` on stderr."""
        print(self.report(), file=sys.stderr)


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f}s"
    return f"{seconds * 1e3:.3f}ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f}µs"


def _rate(tokens: int, seconds: float) -> str:
    return f"{tokens / seconds:.2f} tokens/s" if tokens and seconds > 0 else "-"
