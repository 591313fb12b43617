"""A user's stores as they are in practice: a pinned Hugging Face revision, half-deleted
downloads and damaged Ollama entries. `agentrt models` lists what works and names what it
passed over; `org/name@revision` reaches a snapshot that is not the main branch."""

from __future__ import annotations

import json

import pytest
from test_sources import COMMIT, hf_snapshot, ollama_model, write_gguf

from agentrt.cli import main
from agentrt.models.sources import ModelNotFoundError, list_local_models, locate

OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def _pinned(cache, repo_id: str, commit: str = COMMIT, ref: str | None = None):
    """A repository downloaded only at ``commit`` (``hf download --revision``): no refs/main;
    with ``ref``, refs/<ref> names the commit (a tag or branch)."""
    snapshot = hf_snapshot(cache, repo_id)
    refs = snapshot.parent.parent / "refs"
    (refs / "main").unlink()
    if commit != COMMIT:
        snapshot = snapshot.rename(snapshot.parent / commit)
    if ref is not None:
        (refs / ref).write_text(commit)
    return snapshot


def test_a_hub_id_takes_a_revision_as_hugging_face_tools_write_it(stores):
    cache, _ = stores
    snapshot = _pinned(cache, "org/tiny", ref="v1.0")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert locate(f"org/tiny@{COMMIT}") == (snapshot, "huggingface")
    assert locate("org/tiny@v1.0") == (snapshot, "huggingface")
    gguf = _pinned(cache, "org/tiny-GGUF", commit=OTHER)
    q8 = write_gguf(gguf / "tiny-q8_0.gguf")
    write_gguf(gguf / "tiny-q4_0.gguf")
    assert locate(f"org/tiny-GGUF@{OTHER}:q8_0") == (q8, "huggingface")


def test_a_missing_revision_is_a_miss_in_the_hf_cache_naming_what_is_cached(stores):
    cache, _ = stores
    (_pinned(cache, "org/tiny") / "config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError) as miss:
        locate("org/tiny")  # no main branch in the cache: say which revisions are
    assert str(cache) in str(miss.value) and f"org/tiny@{COMMIT}" in str(miss.value)
    with pytest.raises(ModelNotFoundError) as miss:
        locate("org/tiny@v2")
    assert str(cache) in str(miss.value) and "no revision v2" in str(miss.value)
    for bad in ("org/tiny@../../x", "org/tiny@", "org/tiny@/etc"):
        with pytest.raises(ModelNotFoundError, match="revision"):
            locate(bad)


def test_a_pinned_download_is_listed_by_a_name_that_resolves(stores):
    cache, _ = stores
    (_pinned(cache, "org/tiny", ref="v1.0") / "config.json").write_text("{}")
    write_gguf(_pinned(cache, "org/bare-GGUF", commit=OTHER) / "bare-q8_0.gguf")
    found = {m.name: m for m in list_local_models()}
    assert found["org/tiny@v1.0"].path == locate("org/tiny@v1.0")[0]
    name = f"org/bare-GGUF@{OTHER}:bare-q8_0.gguf"
    assert found[name].path == locate(name)[0]


def _damaged_stores(cache, models, tmp_path) -> None:
    """One good model in each store beside damaged entries."""
    source = write_gguf(tmp_path / "src.gguf", arch="llama")
    ollama_model(models, ("registry.ollama.ai", "library", "good", "latest"), source)
    ollama_model(models, ("registry.ollama.ai", "library", "noblob", "latest"),
                 write_gguf(tmp_path / "other.gguf", arch="qwen3")).unlink()
    bad = models / "manifests" / "registry.ollama.ai" / "library" / "badjson" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{")
    snapshot = hf_snapshot(cache, "org/half-GGUF")  # a blob deleted from under its snapshot
    (snapshot / "half-q4_k_m.gguf").symlink_to(snapshot.parent.parent / "blobs" / "gone")
    write_gguf(snapshot / "half-q8_0.gguf")


def test_the_listing_shows_what_works_and_names_what_it_skipped(stores, tmp_path, capsys):
    cache, models = stores
    _damaged_stores(cache, models, tmp_path)
    skipped: list = []
    names = {m.name for m in list_local_models(skipped=skipped)}
    assert {"ollama:good:latest", "org/half-GGUF:half-q8_0.gguf"} <= names
    why = {s.name: s.reason for s in skipped}
    assert set(why) == {"ollama:noblob:latest", "ollama:badjson:latest",
                        "org/half-GGUF:half-q4_k_m.gguf"}
    assert "missing" in why["ollama:noblob:latest"]
    assert "not an Ollama manifest" in why["ollama:badjson:latest"]
    assert "broken link" in why["org/half-GGUF:half-q4_k_m.gguf"]
    for argv in (["models"], ["models", "--json"]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert "ollama:good:latest" in out and "ollama:noblob" not in out
        assert all(f"skipped {name}" in err for name in why), err
    rows = json.loads((main(["models", "--json"]), capsys.readouterr().out)[1])
    assert "ollama:badjson:latest" not in {r["name"] for r in rows}


def test_listing_reads_only_the_keys_it_shows_not_the_whole_tokenizer(stores, tmp_path,
                                                                       monkeypatch):
    import gguf
    import numpy as np

    def refuse(*args, **kwargs):  # it parsed every token of the vocabulary: seconds a model
        raise AssertionError("the listing read the whole header")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    cache, _ = stores
    snapshot = hf_snapshot(cache, "org/tiny-GGUF")
    writer = gguf.GGUFWriter(str(snapshot / "tiny-f16.gguf"), "qwen3")  # no general.file_type
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.zeros(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    found = {m.name: (m.architecture, m.format) for m in list_local_models()}
    assert found["SmolLM2-135M-Instruct"] == ("llama", "Q4_1")
    assert found["org/tiny-GGUF:tiny-f16.gguf"] == ("qwen3", "F16")  # most values' type


def test_a_gguf_file_without_the_suffix_is_a_gguf_file(stores, tmp_path):
    """`ollama show NAME --modelfile` prints ``FROM <models>/blobs/sha256-…``: users pass that
    path; it is a GGUF file whatever its name."""
    _, models = stores
    blob = ollama_model(models, ("registry.ollama.ai", "library", "tiny", "latest"),
                        write_gguf(tmp_path / "src.gguf"))
    assert locate(str(blob)) == (blob, "path")
    text = tmp_path / "notes.txt"
    text.write_text("GGU")
    with pytest.raises(ModelNotFoundError, match="not a .gguf file"):
        locate(str(text))


def test_an_ollama_name_matches_its_manifest_whatever_the_case(stores, tmp_path):
    """Ollama compares names ignoring case, and its older versions stored every manifest path
    in lower case: the name as a model page prints it reaches such a manifest."""
    _, models = stores
    source = write_gguf(tmp_path / "src.gguf")
    blob = ollama_model(models, ("hf.co", "bartowski", "llama-3.2-1b-instruct-gguf", "q4_k_m"),
                        source)
    name = "ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"
    assert locate(name) == (blob, "ollama")
    ollama_model(models, ("hf.co", "bartowski", "LLAMA-3.2-1B-Instruct-GGUF", "q4_k_m"), source)
    with pytest.raises(ModelNotFoundError, match="2 manifests match"):
        locate(name)  # two stored names differ only in case: ambiguous


def test_a_split_gguf_is_refused_saying_how_to_merge_it(stores, tmp_path):
    """Hugging Face repositories ship large quantizations as llama.cpp's split parts
    (Qwen2.5-7B-Instruct-GGUF's q4_k_m is two files); part 1 alone failed to load with 'GGUF
    tensor for model.norm.weight is missing'."""
    from agentrt.models.config import UnsupportedModelError

    cache, _ = stores
    snapshot = hf_snapshot(cache, "Qwen/Qwen2.5-7B-Instruct-GGUF")
    parts = [write_gguf(snapshot / f"qwen2.5-7b-instruct-q4_k_m-0000{i}-of-00002.gguf")
             for i in (1, 2)]
    q8 = write_gguf(snapshot / "qwen2.5-7b-instruct-q8_0.gguf")
    for spec in ("Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m", str(parts[0]), str(parts[1]),
                 f"Qwen/Qwen2.5-7B-Instruct-GGUF:{parts[1].name}"):
        with pytest.raises(UnsupportedModelError) as refused:
            locate(spec)
        says = str(refused.value)
        assert "of 2 of a split GGUF" in says and "llama-gguf-split --merge" in says, spec
        assert "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf" in says
    assert locate("Qwen/Qwen2.5-7B-Instruct-GGUF:q8_0") == (q8, "huggingface")
    skipped: list = []
    names = {m.name for m in list_local_models(skipped=skipped)}
    assert "Qwen/Qwen2.5-7B-Instruct-GGUF:qwen2.5-7b-instruct-q8_0.gguf" in names
    assert not any("-of-" in name for name in names)
    [skip] = skipped  # the set once, by its first part
    assert skip.name.endswith("-00001-of-00002.gguf") and "split" in skip.reason


def test_a_folder_s_format_is_read_from_either_dtype_key(stores):
    """transformers 4.56+ writes config.json's ``dtype`` (``torch_dtype`` before): listed as
    '?' for every model saved since."""
    cache, _ = stores
    for repo, key in (("org/old", "torch_dtype"), ("org/new", "dtype")):
        snapshot = hf_snapshot(cache, repo)
        (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen3",
                                                          key: "bfloat16"}))
    found = {m.name: m.format for m in list_local_models()}
    assert found["org/old"] == found["org/new"] == "bfloat16"


def test_an_ollama_cloud_model_says_it_has_no_weights_here(stores):
    """`ollama list` shows cloud models (gpt-oss:120b-cloud): their manifest names a config
    and no model layer; 'StopIteration' told the user nothing."""
    _, models = stores
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / "gpt-oss" / "120b-cloud"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json",
        "digest": "sha256:" + "1" * 64}, "layers": []}))
    with pytest.raises(ModelNotFoundError) as miss:
        locate("ollama:gpt-oss:120b-cloud")
    assert "no model layer" in str(miss.value) and "cloud" in str(miss.value)
    assert "StopIteration" not in str(miss.value)


def test_a_gguf_repository_with_a_config_runs_its_gguf(stores):
    """Some GGUF repositories (unsloth's) carry config.json beside the .gguf files and no
    safetensors: the folder was chosen, and failed to load for want of weights."""
    cache, _ = stores
    snapshot = hf_snapshot(cache, "unsloth/Qwen3-0.6B-GGUF")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    gguf = write_gguf(snapshot / "Qwen3-0.6B-Q4_K_M.gguf", arch="qwen3")
    assert locate("unsloth/Qwen3-0.6B-GGUF") == (gguf, "huggingface")
    names = {m.name for m in list_local_models()}
    assert "unsloth/Qwen3-0.6B-GGUF" not in names  # the folder alone would not load
    assert "unsloth/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q4_K_M.gguf" in names
    (snapshot / "model.safetensors").write_bytes(b"")  # a float folder too: the folder
    assert locate("unsloth/Qwen3-0.6B-GGUF") == (snapshot, "huggingface")


def test_a_folder_holding_one_gguf_runs_it(stores, tmp_path):
    """LM Studio keeps ``models/PUBLISHER/REPO/FILE.gguf``, `hf download … --local-dir DIR`
    writes the .gguf into DIR: the folder was 'not a Hugging Face model folder'."""
    folder = tmp_path / "lmstudio-community" / "Qwen3-8B-GGUF"
    folder.mkdir(parents=True)
    gguf = write_gguf(folder / "Qwen3-8B-Q4_K_M.gguf", arch="qwen3")
    assert locate(str(folder)) == (gguf, "path")
    write_gguf(folder / "Qwen3-8B-Q8_0.gguf", arch="qwen3")
    with pytest.raises(ModelNotFoundError) as miss:
        locate(str(folder))
    assert "Qwen3-8B-Q4_K_M.gguf" in str(miss.value) and "Qwen3-8B-Q8_0.gguf" in str(miss.value)
