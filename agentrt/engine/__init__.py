"""The engine: the synchronous core (LLMEngine) and its threaded front door (Engine)."""

from agentrt.engine.engine import Engine
from agentrt.engine.llm_engine import LLMEngine
from agentrt.engine.output_processor import StepUpdate
from agentrt.engine.outputs import EngineLoad, EngineStats, RequestOutput, StreamDelta

__all__ = ["Engine", "EngineLoad", "EngineStats", "LLMEngine", "RequestOutput", "StepUpdate",
           "StreamDelta"]
