"""CostModel: what an iteration, a swap and a token of KV cost on *this* engine.

InferCept's waste equations need T_fwd(x) — the time of an iteration that schedules x tokens —
the swap time per token and M, the KV bytes per token. agentrt does not copy the paper's
constants: the engine fits ``T_fwd(x) = a + b·x + c·x²`` to its own step timings (a start-up
profile, then every step it runs), measures its own page copies, and takes M from the model's
KV layout. The simulator builds the same object from a paper's published profile.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["CostModel", "ForwardTimeFit"]


@dataclass(frozen=True)
class CostModel:
    """Costs in seconds and bytes; ``t_fwd(x) = fwd_a + fwd_b·x + fwd_c·x²``."""

    kv_bytes_per_token: float
    """M: bytes of K and V, all layers, for one token."""
    fwd_a: float
    """Fixed seconds per iteration."""
    fwd_b: float
    """Seconds per scheduled token."""
    fwd_c: float = 0.0
    """Seconds per scheduled token squared (attention's growth on large chunks)."""
    swap_seconds_per_token: float = float("inf")
    """Host↔device copy time per token; inf = no host pool."""
    saturation_tokens: int = 512
    """S: query tokens per iteration beyond which throughput stops growing."""

    def t_fwd(self, num_tokens: float) -> float:
        """Seconds of an iteration that schedules ``num_tokens`` tokens."""
        if num_tokens <= 0:
            return 0.0
        return self.fwd_a + self.fwd_b * num_tokens + self.fwd_c * num_tokens**2

    def t_fwd_marginal(self, num_tokens: float, running_tokens: float) -> float:
        """Seconds ``num_tokens`` add to an iteration that already schedules ``running_tokens``."""
        if running_tokens <= 0:
            return self.t_fwd(num_tokens)
        return self.t_fwd(running_tokens + num_tokens) - self.t_fwd(running_tokens)

    def t_swap(self, num_tokens: float) -> float:
        """Seconds to copy ``num_tokens`` tokens of KV one way."""
        return num_tokens * self.swap_seconds_per_token

    def swap_budget_tokens(self, batch_tokens: float) -> int:
        """N_i: tokens that can be swapped during one iteration of ``batch_tokens`` tokens,
        so that T_swap(N_i) = T_fwd(batch) and the copy hides behind the forward pass."""
        if self.swap_seconds_per_token == float("inf"):
            return 0
        if self.swap_seconds_per_token <= 0:
            return 2**62
        return int(self.t_fwd(max(batch_tokens, 1)) / self.swap_seconds_per_token)

    @property
    def decode_step_seconds(self) -> float:
        """τ: seconds per decode iteration (one token)."""
        return self.t_fwd(1)


class ForwardTimeFit:
    """Least-squares fit of T_fwd(x) over the most recent (tokens, seconds) samples.

    Fits ``a + b·x`` (and ``c·x²`` when the samples span a wide enough range); falls back to
    the last fit when the samples cannot determine it.
    """

    def __init__(self, window: int = 512) -> None:
        self.samples: deque[tuple[int, float]] = deque(maxlen=window)
        self._coef = (0.0, 0.0, 0.0)

    def add(self, num_tokens: int, seconds: float) -> None:
        self.samples.append((num_tokens, seconds))

    def extend(self, samples: Iterable[tuple[int, float]]) -> None:
        for x, t in samples:
            self.add(x, t)

    def coefficients(self) -> tuple[float, float, float]:
        """(a, b, c) of the current fit; all ≥ 0."""
        xs = sorted({x for x, _ in self.samples})
        if len(xs) >= 2:
            quadratic = len(xs) >= 4 and xs[-1] >= 4 * xs[1]
            self._coef = _lstsq(self.samples, quadratic) or self._coef
        elif self.samples:
            x, t = self.samples[-1]
            self._coef = (0.0, t / max(x, 1), 0.0)
        return self._coef


def _lstsq(samples: Iterable[tuple[int, float]], quadratic: bool):
    """Normal equations for t = a + b·x (+ c·x²); None if singular or the fit is negative."""
    n = 3 if quadratic else 2
    ata = [[0.0] * n for _ in range(n)]
    aty = [0.0] * n
    for x, t in samples:
        row = [1.0, float(x), float(x) ** 2][:n]
        for i in range(n):
            aty[i] += row[i] * t
            for j in range(n):
                ata[i][j] += row[i] * row[j]
    sol = _solve(ata, aty)
    if sol is None or sol[1] < 0:
        return None
    a, b, c = (sol + [0.0])[:3]
    if c < 0:
        return _lstsq(samples, quadratic=False) if quadratic else None
    return (max(a, 0.0), b, c)


def _solve(m: list[list[float]], y: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting on a tiny dense system."""
    n = len(y)
    m = [row[:] + [y[i]] for i, row in enumerate(m)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]
