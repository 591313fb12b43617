"""SwapBudget: how many tokens of KV may move between device and host in one iteration.

InferCept sizes each iteration's swap budget N_i so that T_swap(N_i) = T_fwd(batch): the copy
then hides behind the forward pass. Swap-ins (resumed requests waiting for their KV) are
served before swap-outs. Every grant keeps the three constraints of the paper:

    in + out ≤ N_i
    out ≤ free host memory + in
    in + new tokens ≤ out + free device memory

Unused budget carries over, capped at max(N_i, the largest swap-in waiting), so a request
whose KV is bigger than one iteration's budget is brought back over several iterations'
worth of copy time instead of never.
"""

from __future__ import annotations

__all__ = ["SwapBudget"]


class SwapBudget:
    def __init__(self) -> None:
        self.credit = 0
        self.num_in = 0
        self.num_out = 0
        self.host_free = 0
        self.device_free = 0
        self.new_tokens = 0

    def start_step(self, budget: int, host_free: int, device_free: int, new_tokens: int = 0,
                   largest_waiting_in: int = 0) -> None:
        """Open an iteration with ``budget`` tokens of copy time and the free memory now."""
        cap = max(budget, largest_waiting_in)
        self.credit = min(self.credit + budget, cap)
        self.num_in = self.num_out = 0
        self.host_free, self.device_free, self.new_tokens = host_free, device_free, new_tokens

    @property
    def remaining(self) -> int:
        return self.credit - self.num_in - self.num_out

    def can_swap_in(self, num_tokens: int) -> bool:
        return (num_tokens <= self.remaining
                and self.num_in + num_tokens + self.new_tokens <= self.num_out + self.device_free)

    def can_swap_out(self, num_tokens: int) -> bool:
        return (num_tokens <= self.remaining
                and self.num_out + num_tokens <= self.host_free + self.num_in)

    def grant_in(self, num_tokens: int) -> bool:
        """Reserve a swap-in of ``num_tokens``; False (nothing reserved) if it does not fit."""
        if not self.can_swap_in(num_tokens):
            return False
        self.num_in += num_tokens
        return True

    def grant_out(self, num_tokens: int) -> bool:
        """Reserve a swap-out of ``num_tokens``; False (nothing reserved) if it does not fit."""
        if not self.can_swap_out(num_tokens):
            return False
        self.num_out += num_tokens
        return True

    def end_step(self) -> None:
        """Spend what was granted."""
        self.credit -= self.num_in + self.num_out
        self.num_in = self.num_out = 0

    def holds(self) -> bool:
        """The paper's constraints for what was granted so far in this iteration."""
        return (self.num_in + self.num_out <= self.credit
                and self.num_out <= self.host_free + self.num_in
                and self.num_in + self.new_tokens <= self.num_out + self.device_free)
