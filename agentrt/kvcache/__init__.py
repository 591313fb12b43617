"""KV memory: a reference-counted paged block pool, a radix prefix cache, a host tier."""

from agentrt.kvcache.base import BasePrefixCache, InsertResult, MatchResult
from agentrt.kvcache.block_pool import BlockPool, OutOfBlocksError
from agentrt.kvcache.manager import KVCacheManager
from agentrt.kvcache.radix_cache import RadixCache, RadixNode

__all__ = [
    "BasePrefixCache",
    "BlockPool",
    "InsertResult",
    "KVCacheManager",
    "MatchResult",
    "OutOfBlocksError",
    "RadixCache",
    "RadixNode",
]
