"""Hostile Ollama stores: a manifest that is not a small JSON file is a miss, never a crash."""

from __future__ import annotations

import os
import threading

import pytest

from agentrt.models.sources import ModelNotFoundError, list_local_models, locate


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """An empty Ollama store as $OLLAMA_MODELS, and the manifest path of ollama:bad."""
    models = tmp_path / "ollama"
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / "bad" / "latest"
    manifest.parent.mkdir(parents=True)
    monkeypatch.setenv("OLLAMA_MODELS", str(models))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return manifest


@pytest.mark.parametrize("text", ["[" * 200_000, '{"layers": ' + "[" * 100_000 + "]" * 100_000 + "}"])
def test_a_deeply_nested_manifest_is_a_miss_not_a_recursion_error(store, text):
    store.write_text(text)  # under the 1 MiB limit; json raised RecursionError through locate
    with pytest.raises(ModelNotFoundError, match="not an Ollama manifest"):
        locate("ollama:bad")
    assert not [m for m in list_local_models() if m.source == "ollama"]


def test_listing_skips_a_manifest_that_is_not_a_regular_file(store):
    os.mkfifo(store)  # reading it blocked `agentrt models` for ever (and /dev/zero: 0 bytes by
    # stat, read without end)
    found: list = []
    worker = threading.Thread(target=lambda: found.append(list_local_models()), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        with open(store, "wb"):  # let the blocked reader go before failing
            pass
    assert found, "listing hung on a FIFO manifest"
    assert not [m for m in found[0] if m.source == "ollama"]
