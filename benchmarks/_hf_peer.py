"""The LangChain user's peer of the chain benchmarks (chain_rag.py, map_reduce.py).

``ChatHuggingFace(llm=HuggingFacePipeline(transformers.pipeline("text-generation", ...)))`` on
the same weights agentrt serves — exactly agent_langchain.py's backend (a), whose pieces
(``GenerateMeter``, the stop-honouring ``StopStringPipeline``) are imported from there: the
model is loaded from agentrt's converted float32 safetensors folder of the same GGUF
(``engine.model_info.path``), greedy. One model and tokenizer; one pipeline (and chat model)
per token limit, since ``HuggingFacePipeline`` takes ``max_new_tokens`` when it is built
rather than per call as ``ChatAgentRT(max_tokens=...)`` does.

Benchmark-only dependency: ``langchain-huggingface`` (``pip install langchain-huggingface``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# agent_langchain sets HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE before transformers is imported
from agent_langchain import GenerateMeter, _make_stop_pipeline_class


class HFPeer:
    """One transformers model (float32, eval) shared by the chat models :meth:`chat` builds;
    :attr:`meter` counts every ``model.generate`` call's prompt and generated tokens."""

    def __init__(self, model_path: Path | str) -> None:
        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()  # "Loading weights"
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(model_path), local_files_only=True)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_path), dtype=torch.float32, local_files_only=True)
        self.model.eval()
        self.meter = GenerateMeter(self.model)
        self._pipeline_cls = _make_stop_pipeline_class()

    def chat(self, max_new_tokens: int) -> Any:
        """A ``ChatHuggingFace`` over a greedy text-generation pipeline of this model that
        generates at most ``max_new_tokens`` tokens per call."""
        import transformers
        from langchain_huggingface import ChatHuggingFace

        pipe = transformers.pipeline("text-generation", model=self.model,
                                     tokenizer=self.tokenizer, max_new_tokens=max_new_tokens,
                                     do_sample=False, return_full_text=False)
        llm = self._pipeline_cls(pipeline=pipe, meter=self.meter)
        return ChatHuggingFace(llm=llm, tokenizer=self.tokenizer)

    def counters(self) -> tuple[int, int, int]:
        """Totals over every call so far, once no generate call is running: (prompt tokens —
        all prefilled, cached tokens — always 0, no prefix cache, decode tokens). Decode tokens
        count as agentrt's engine counts them, tokens fed through a decode step: every
        generated token but the last of each reply (the first comes out of the prefill)."""
        self.meter.wait_idle()
        m = self.meter
        return m.prompt, 0, m.generated - m.calls
