"""agentrt.semantic: semantic functions and variables (Parrot), run as one application DAG.

>>> from agentrt.semantic import Perf, SemanticSession, semantic_function
>>> @semantic_function(max_tokens=16)
... def summarize(chunk):
...     \"\"\"{{input:chunk}}
...     One-line summary:{{output:summary}}\"\"\"
>>> with SemanticSession() as s:                  # the local engine (or backend=...)
...     print(summarize("Paris is the capital of France.").get(perf=Perf.LATENCY))

- :mod:`~agentrt.semantic.functions`: templates and ``@semantic_function``;
- :mod:`~agentrt.semantic.variables`: the values that flow between calls;
- :mod:`~agentrt.semantic.session`: ``SemanticSession``, the DAG's front door;
- :mod:`~agentrt.semantic.dag`: the request DAG and objective deduction;
- :mod:`~agentrt.semantic.prefixes`: prompt prefixes ready requests share;
- :mod:`~agentrt.semantic.executor`: dispatching the DAG on a backend.
"""

from __future__ import annotations

from agentrt.semantic.dag import LATENCY_BONUS, Perf, SemanticError
from agentrt.semantic.executor import SemanticStats
from agentrt.semantic.functions import SemanticFunction, Template, semantic_function
from agentrt.semantic.session import SemanticSession
from agentrt.semantic.variables import SemanticVariable

__all__ = [
    "LATENCY_BONUS", "Perf", "SemanticError", "SemanticFunction", "SemanticSession",
    "SemanticStats", "SemanticVariable", "Template", "semantic_function",
]
