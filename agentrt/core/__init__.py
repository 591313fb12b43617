"""Core types shared by every layer; they import nothing else of agentrt.

KVCacheTensors (torch) lives in :mod:`agentrt.core.kv_tensors` and is not imported here, so
torch-free processes (tool workers) can use the rest.
"""

from agentrt.core.model_info import ModelInfo
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import RequestOutput, StreamDelta
from agentrt.core.request import FinishReason, HookAction, Request, RequestStats, RequestStatus
from agentrt.core.sampling_params import Grammar, SamplingParams

__all__ = [
    "FinishReason",
    "Grammar",
    "HookAction",
    "ModelInfo",
    "Request",
    "RequestOptions",
    "RequestOutput",
    "RequestStats",
    "RequestStatus",
    "SamplingParams",
    "StreamDelta",
]
