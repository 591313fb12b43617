"""Core types shared by every layer; they import nothing else of agentrt.

KVCacheTensors (torch) lives in :mod:`agentrt.core.kv_tensors` and is not imported here, so
torch-free processes (tool workers) can use the rest.
"""

from agentrt.core.request import FinishReason, HookAction, Request, RequestStats, RequestStatus
from agentrt.core.sampling_params import SamplingParams

__all__ = [
    "FinishReason",
    "HookAction",
    "Request",
    "RequestStats",
    "RequestStatus",
    "SamplingParams",
]
