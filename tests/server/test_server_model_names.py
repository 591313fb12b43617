"""The names ``agentrt serve --model X`` answers to: what clients of X's own tools send."""

from __future__ import annotations

import pytest

from agentrt.server.state import default_model_names


@pytest.mark.parametrize(("model", "names"), [
    # a client of Ollama's OpenAI API sends the name as `ollama list` prints it
    ("ollama:qwen3:0.6b", ["qwen3:0.6b", "ollama:qwen3:0.6b"]),
    # Ollama reads a name without a tag as :latest, so the bare name is this model too
    ("ollama:llama3.2", ["llama3.2:latest", "llama3.2", "ollama:llama3.2"]),
    ("ollama:me/tiny:q8", ["me/tiny:q8", "ollama:me/tiny:q8"]),
    ("ollama:registry.ollama.ai/library/llama3:8b",
     ["llama3:8b", "registry.ollama.ai/library/llama3:8b",
      "ollama:registry.ollama.ai/library/llama3:8b"]),
    ("ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
     ["hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
      "ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"]),
    # paths and hub ids as before: the short name first, then the value given
    ("/models/qwen2.5-0.5b-instruct-q4_k_m.gguf",
     ["qwen2.5-0.5b-instruct-q4_k_m", "/models/qwen2.5-0.5b-instruct-q4_k_m.gguf"]),
    ("HuggingFaceTB/SmolLM2-135M-Instruct",
     ["SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"]),
])
def test_a_model_is_served_under_the_names_its_users_send(model, names):
    assert default_model_names(model) == names
