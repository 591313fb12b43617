"""agentrt: a local agent runtime with its own paged-KV engine.

The front door is :class:`Engine`; requests are shaped by :class:`SamplingParams` and
answered with :class:`RequestOutput` (whole) or :class:`StreamDelta` (streamed).
"""

from agentrt.config import EngineConfig
from agentrt.core.request import Pause
from agentrt.core.sampling_params import SamplingParams
from agentrt.engine import Engine, LLMEngine, RequestOutput, StreamDelta
from agentrt.models import DEFAULT_MODEL, ModelNotFoundError, UnsupportedModelError

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "Engine",
    "EngineConfig",
    "LLMEngine",
    "ModelNotFoundError",
    "Pause",
    "RequestOutput",
    "SamplingParams",
    "StreamDelta",
    "UnsupportedModelError",
    "__version__",
]
