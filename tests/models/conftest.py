"""Fixtures of the model-loading tests."""

from __future__ import annotations

import pytest

from agentrt import env


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A cache of its own for the converted config/tokenizer; the compiled kernels shared."""
    kernels = env.cache_dir() / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "kernels").symlink_to(kernels)
    monkeypatch.setenv("AGENTRT_CACHE", str(tmp_path / "cache"))


@pytest.fixture()
def stores(tmp_path, monkeypatch):
    """An empty HF cache and Ollama store, and $AGENTRT_MODEL unset."""
    cache, models = tmp_path / "hf" / "hub", tmp_path / "ollama"
    cache.mkdir(parents=True)
    models.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("OLLAMA_MODELS", str(models))
    monkeypatch.delenv("AGENTRT_MODEL", raising=False)
    return cache, models
