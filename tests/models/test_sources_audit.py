"""Hostile Ollama stores: a manifest that is not a small JSON file is a miss, never a crash."""

from __future__ import annotations

import os
import threading
from pathlib import Path

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


@pytest.mark.parametrize("text", [
    "[" * 200_000, '{"layers": ' + "[" * 100_000 + "]" * 100_000 + "}"])
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


def test_a_name_in_two_ollama_stores_lists_once_as_locate_resolves_it(tmp_path, monkeypatch):
    import hashlib
    import json

    from agentrt import env

    def put(models, data: bytes) -> Path:
        digest = hashlib.sha256(data).hexdigest()
        (models / "blobs").mkdir(parents=True)
        (blob := models / "blobs" / f"sha256-{digest}").write_bytes(data)
        manifest = models / "manifests" / "registry.ollama.ai" / "library" / "x" / "latest"
        manifest.parent.mkdir(parents=True)
        manifest.write_text(json.dumps({"layers": [{
            "mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}]}))
        return blob

    home, service = tmp_path / "home", tmp_path / "service"  # ~/.ollama and the Linux service's
    blobs = [put(home, b"GGUF-home"), put(service, b"GGUF-service")]
    monkeypatch.setattr(env, "ollama_models_dirs", lambda: [home, service])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    listed = [(m.name, m.path) for m in list_local_models() if m.source == "ollama"]
    assert listed == [("ollama:x:latest", blobs[0])]  # was listed twice, once per store
    assert locate("ollama:x") == (blobs[0], "ollama")
    blobs[0].unlink()  # the first store's manifest now names a missing blob: locate stops there
    with pytest.raises(ModelNotFoundError, match="missing"):
        locate("ollama:x")
    assert not [m for m in list_local_models() if m.source == "ollama"]  # listed the second's
