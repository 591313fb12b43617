"""Core types shared by every layer; they import nothing else of agentrt."""

from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.core.request import FinishReason, HookAction, Request, RequestStats, RequestStatus
from agentrt.core.sampling_params import SamplingParams

__all__ = [
    "FinishReason",
    "HookAction",
    "KVCacheTensors",
    "Request",
    "RequestStats",
    "RequestStatus",
    "SamplingParams",
]
