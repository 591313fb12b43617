"""agentrt: a local agent runtime with its own paged-KV engine.

The front door is :class:`Engine`; requests are shaped by :class:`SamplingParams` and
answered with :class:`RequestOutput` (whole) or :class:`StreamDelta` (streamed).
:func:`get_backend` gives the same agent runs another token source (an SGLang server).
"""

from agentrt._version import __version__
from agentrt.backends import Backend, get_backend
from agentrt.config import EngineConfig
from agentrt.core.options import RequestOptions
from agentrt.core.request import Pause
from agentrt.core.sampling_params import Grammar, SamplingParams
from agentrt.engine import Engine, LLMEngine, RequestOutput, StreamDelta
from agentrt.models import DEFAULT_MODEL, ModelNotFoundError, UnsupportedModelError
from agentrt.session import Session, SessionStats
from agentrt.session_table import SessionTable


def __getattr__(name: str):
    """``agentrt.Executor``: the LangChain ``AgentExecutor`` drop-in, imported on first use
    so that ``import agentrt`` never needs LangChain; ``agentrt.semantic_function`` and
    ``agentrt.compile_graph``: :mod:`agentrt.semantic` / :mod:`agentrt.graph`, imported on
    first use."""
    if name == "semantic_function":
        from agentrt.semantic import semantic_function

        return semantic_function
    if name == "compile_graph":
        from agentrt.graph import compile

        return compile
    if name == "Executor":
        try:
            import langchain_agentrt  # noqa: F401
        except ImportError as exc:
            raise ImportError("agentrt.Executor is in the LangChain integration: "
                              "pip install 'langchain-agentrt[executor]'") from exc
        from langchain_agentrt.executor import Executor  # NOTE: names langchain-classic if missing

        return Executor
    raise AttributeError(f"module 'agentrt' has no attribute {name!r}")

__all__ = [
    "Backend",
    "DEFAULT_MODEL",
    "Engine",
    "EngineConfig",
    "Grammar",
    "LLMEngine",
    "ModelNotFoundError",
    "Pause",
    "RequestOptions",
    "RequestOutput",
    "SamplingParams",
    "Session",
    "SessionStats",
    "SessionTable",
    "StreamDelta",
    "UnsupportedModelError",
    "__version__",
    "get_backend",
]
