"""LlamaIndex embeddings of agentrt: all-MiniLM-L6-v2 offline on CPU, and a faiss-backed index.

>>> from llama_index.embeddings.agentrt import AgentRTEmbedding
>>> AgentRTEmbedding().get_text_embedding("hello")       # 384 floats, unit norm

Shipped in the ``llama-index-llms-agentrt`` distribution; the model and faiss come with its
``[rag]`` extra. Importing this package loads neither.
"""

from __future__ import annotations

from llama_index.embeddings.agentrt.base import AgentRTEmbedding, faiss_vector_store_index

__all__ = ["AgentRTEmbedding", "faiss_vector_store_index"]
