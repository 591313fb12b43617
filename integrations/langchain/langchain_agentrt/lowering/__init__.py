"""LCEL → agentrt's primitive graph (:func:`lower_runnable`; run it with
:func:`agentrt.graph.compile`)."""

from langchain_agentrt.lowering.walk import RULES, lower_runnable

__all__ = ["RULES", "lower_runnable"]
