"""The GGUF model cache (``cache_dir()/models``) keeps one folder per GGUF file still on the
machine: each folder records its source in ``source.json``, and writing a new folder first
removes the folders of files that are gone, changed or of an older layout, legacy folders
without ``source.json`` and crashed conversions' ``.partial`` leftovers -- never anything else
in that directory, and never on a cache hit."""

from __future__ import annotations

import json
import logging
import os
import time
import types

import gguf
import pytest
from gguf_models import write_random_llama

from agentrt import env
from agentrt.models import files
from agentrt.models.files import PARTIAL_MAX_AGE_S, gguf_folder, prune_gguf_folders

pytestmark = pytest.mark.usefixtures("private_cache")  # see conftest.py

CFG = types.SimpleNamespace(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=64, vocab_size=512, rope_theta=1e4,
                            rms_norm_eps=1e-5)
LEGACY = "model-0123456789abcdef"  # an older agentrt's folder: our naming, no source.json


def _gguf(path):
    return write_random_llama(path, CFG, lambda _: gguf.GGMLQuantizationType.F32)


def _models():
    return env.cache_dir() / "models"


def _folder(name: str, source: dict | None = None):
    """A cache folder as a conversion leaves it (``source=None``: as older agentrt did)."""
    path = _models() / name
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if source is not None:
        (path / "source.json").write_text(json.dumps(source))
    return path


def _age(path, seconds: float) -> None:
    old = time.time() - seconds
    for entry in [path, *path.iterdir()]:
        os.utime(entry, (old, old))


def test_a_deleted_files_folder_goes_when_another_is_written(tmp_path, caplog):
    a, b = _gguf(tmp_path / "a.gguf"), _gguf(tmp_path / "b.gguf")
    folder_a = gguf_folder(a)
    source = json.loads((folder_a / "source.json").read_text())
    stat = a.stat()
    assert source == {"path": str(a.resolve()), "size": stat.st_size,
                      "mtime_ns": stat.st_mtime_ns, "layout": files._LAYOUT}

    a.unlink()
    with caplog.at_level(logging.INFO, logger="agentrt.models.files"):
        folder_b = gguf_folder(b)
    assert not folder_a.exists()
    assert (folder_b / "config.json").is_file() and (folder_b / "source.json").is_file()
    assert sorted(p.name for p in _models().iterdir()) == [folder_b.name]
    assert folder_a.name in caplog.text and "1 stale" in caplog.text and "MB freed" in caplog.text


def test_a_replaced_files_folder_goes_and_a_live_ones_stays(tmp_path):
    a, b = _gguf(tmp_path / "a.gguf"), _gguf(tmp_path / "b.gguf")
    old_a, live_b = gguf_folder(a), gguf_folder(b)

    stat = a.stat()
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # replaced in place
    new_a = gguf_folder(a)
    assert new_a != old_a and not old_a.exists()
    assert (new_a / "config.json").is_file()
    assert (live_b / "config.json").is_file() and gguf_folder(b) == live_b  # still reused


def test_a_hit_prunes_nothing(tmp_path):
    a = _gguf(tmp_path / "a.gguf")
    folder = gguf_folder(a)
    legacy = _folder(LEGACY)
    assert gguf_folder(a) == folder
    assert legacy.exists()  # pruning waits for the next conversion
    assert prune_gguf_folders() == [legacy] and not legacy.exists()


def test_what_is_pruned_and_what_is_kept(tmp_path):
    live = _gguf(tmp_path / "live.gguf")
    stat = live.stat()
    source = {"path": str(live.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    kept = [
        _folder("live-1111111111111111", {**source, "layout": files._LAYOUT}),
        _folder("newer-2222222222222222", {**source, "layout": files._LAYOUT + 1}),
        _folder("fresh-3333333333333333.0a1b2c.partial"),
        _folder("notes"),  # not our naming: never touched, however old
        _folder("model-0123456789ABCDEF"),
        _folder("model-0123456789abcdef.bak"),
    ]
    _age(kept[-1], 10 * PARTIAL_MAX_AGE_S)
    (_models() / "readme-4444444444444444").write_text("a file, not a folder")
    pruned = [
        _folder(LEGACY),
        _folder("older-5555555555555555", {**source, "layout": files._LAYOUT - 1}),
        _folder("resized-6666666666666666", {**source, "size": stat.st_size + 1,
                                             "layout": files._LAYOUT}),
        _folder("gone-7777777777777777", {**source, "path": str(tmp_path / "gone.gguf"),
                                          "layout": files._LAYOUT}),
        _folder("damaged-8888888888888888"),
        _folder("crashed-9999999999999999.0a1b2c.partial"),
        _folder("crashed-aaaaaaaaaaaaaaaa.partial"),  # an older agentrt's temporary name
    ]
    (pruned[4] / "source.json").write_text("{not json")
    for partial in pruned[-2:]:
        _age(partial, 2 * PARTIAL_MAX_AGE_S)

    b = _gguf(tmp_path / "b.gguf")
    written = gguf_folder(b)
    assert [p for p in pruned if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []
    assert (_models() / "readme-4444444444444444").read_text() == "a file, not a folder"
    assert sorted(p.name for p in _models().iterdir()) == sorted(
        [written.name, "readme-4444444444444444", *(p.name for p in kept)])


def test_a_folder_another_process_removed_first_is_passed_over(tmp_path, monkeypatch):
    legacy, other = _folder(LEGACY), _folder("other-bbbbbbbbbbbbbbbb")
    is_stale = files._is_stale

    def raced(path):  # another process prunes the folder right after we judged it stale
        stale = is_stale(path)
        if stale and path == other:
            for entry in path.iterdir():
                entry.unlink()
            path.rmdir()
        return stale

    monkeypatch.setattr(files, "_is_stale", raced)
    assert prune_gguf_folders() == [legacy]
    assert not legacy.exists() and not other.exists()


def test_no_models_folder_prunes_nothing():
    assert not _models().exists()
    assert prune_gguf_folders() == []


def test_weights_asked_after_a_folder_without_them(tmp_path):
    a = _gguf(tmp_path / "a.gguf")
    light = gguf_folder(a)
    assert not (light / "model.safetensors").exists()
    full = gguf_folder(a, weights=True)
    assert full == light
    assert {"config.json", "tokenizer_config.json", "model.safetensors", "source.json"} <= {
        p.name for p in full.iterdir()}
    assert gguf_folder(a) == full and gguf_folder(a, weights=True) == full
    assert sorted(p.name for p in _models().iterdir()) == [full.name]  # no .partial left
