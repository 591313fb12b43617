"""Finding models where users keep them: paths, a fake Hugging Face cache, a fake Ollama store."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from agentrt.cli import main
from agentrt.models.sources import (
    DEFAULT_MODEL,
    ModelNotFoundError,
    OllamaName,
    list_local_models,
    locate,
    parse_ollama_name,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_gguf(path: Path, arch: str = "qwen2") -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def hf_snapshot(cache: Path, repo_id: str) -> Path:
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    return snapshot


def ollama_model(models: Path, manifest_parts: tuple[str, ...], blob_source: Path) -> Path:
    data = blob_source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (models / "blobs").mkdir(parents=True, exist_ok=True)
    blob = models / "blobs" / f"sha256-{digest}"
    blob.write_bytes(data)
    manifest = models.joinpath("manifests", *manifest_parts)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
    ]}))
    return blob


def test_paths_resolve_to_themselves(stores, tmp_path):
    gguf_file = write_gguf(tmp_path / "m.gguf")
    assert locate(gguf_file) == (gguf_file, "path")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert locate(str(folder)) == (folder, "path")


def test_a_hub_id_resolves_from_the_cache_offline(stores):
    cache, _ = stores
    snapshot = hf_snapshot(cache, "org/tiny")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert locate("org/tiny") == (snapshot, "huggingface")


def test_a_gguf_repository_takes_a_quantization_pick(stores):
    cache, _ = stores
    snapshot = hf_snapshot(cache, "org/tiny-GGUF")
    q4 = write_gguf(snapshot / "tiny-q4_k_m.gguf")
    write_gguf(snapshot / "tiny-q8_0.gguf")
    assert locate("org/tiny-GGUF:Q4_K_M") == (q4, "huggingface")
    assert locate("org/tiny-GGUF:tiny-q4_k_m.gguf") == (q4, "huggingface")
    with pytest.raises(ModelNotFoundError, match=r"org/tiny-GGUF:tiny-q8_0\.gguf"):
        locate("org/tiny-GGUF")  # two files: the error lists the choices


def test_an_ollama_name_resolves_to_the_manifest_s_blob(stores, tmp_path):
    _, models = stores
    source = write_gguf(tmp_path / "src.gguf", arch="llama")
    blob = ollama_model(models, ("registry.ollama.ai", "library", "tiny", "latest"), source)
    tagged = ollama_model(models, ("registry.ollama.ai", "me", "tiny", "q8"), source)
    assert locate("ollama:tiny") == (blob, "ollama")
    assert locate("ollama:tiny:latest") == (blob, "ollama")
    assert locate("ollama:me/tiny:q8") == (tagged, "ollama")


def test_misses_say_where_they_looked(stores):
    cache, models = stores
    with pytest.raises(ModelNotFoundError) as hub:
        locate("org/absent")
    assert str(cache) in str(hub.value) and "nothing is downloaded" in str(hub.value)
    with pytest.raises(ModelNotFoundError) as ollama:
        locate("ollama:absent:7b")
    expected = models / "manifests" / "registry.ollama.ai" / "library" / "absent" / "7b"
    assert str(expected) in str(ollama.value)


@pytest.mark.parametrize(("name", "parts", "short"), [
    ("llama3", ("registry.ollama.ai", "library", "llama3", "latest"), "llama3:latest"),
    ("qwen2.5:0.5b", ("registry.ollama.ai", "library", "qwen2.5", "0.5b"), "qwen2.5:0.5b"),
    ("me/tiny:q8", ("registry.ollama.ai", "me", "tiny", "q8"), "me/tiny:q8"),
    ("registry.ollama.ai/library/llama3:8b", ("registry.ollama.ai", "library", "llama3", "8b"),
     "llama3:8b"),
    ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
     ("hf.co", "bartowski", "Llama-3.2-1B-Instruct-GGUF", "Q4_K_M"),
     "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
    ("localhost:5000/team/mymodel:v1", ("localhost:5000", "team", "mymodel", "v1"),
     "localhost:5000/team/mymodel:v1"),
    ("localhost:5000/team/mymodel", ("localhost:5000", "team", "mymodel", "latest"),
     "localhost:5000/team/mymodel:latest"),  # the port's ':' is not a tag's
])
def test_an_ollama_name_splits_as_ollama_splits_it(name, parts, short):
    parsed = parse_ollama_name(name)
    assert parsed == OllamaName(*parts)
    assert parsed.short == short  # as `ollama list` prints it
    assert parse_ollama_name(short) == parsed


def test_ollama_names_with_a_host_or_a_port_resolve_to_their_manifest(stores, tmp_path):
    _, models = stores
    source = write_gguf(tmp_path / "src.gguf", arch="llama")
    ported = ollama_model(models, ("localhost:5000", "team", "mymodel", "v1"), source)
    ported_latest = ollama_model(models, ("localhost:5000", "team", "mymodel", "latest"), source)
    hf = ollama_model(models, ("hf.co", "bartowski", "Tiny-GGUF", "Q4_K_M"), source)
    library = ollama_model(models, ("registry.ollama.ai", "library", "llama3", "8b"), source)
    for name, blob in [("ollama:localhost:5000/team/mymodel:v1", ported),
                       ("ollama:localhost:5000/team/mymodel", ported_latest),
                       ("ollama:hf.co/bartowski/Tiny-GGUF:Q4_K_M", hf),
                       ("ollama:registry.ollama.ai/library/llama3:8b", library),
                       ("ollama:library/llama3:8b", library)]:
        assert locate(name) == (blob, "ollama"), name
    with pytest.raises(ModelNotFoundError) as miss:  # another port is another folder
        locate("ollama:localhost:5001/team/mymodel:v1")
    assert str(models / "manifests" / "localhost:5001" / "team" / "mymodel" / "v1") in str(
        miss.value)


def test_every_listed_ollama_model_resolves_back_to_its_blob(stores, tmp_path, capsys):
    _, models = stores
    source = write_gguf(tmp_path / "src.gguf", arch="llama")
    expected = {  # name as `ollama list` prints it -> manifest folders
        "tiny:latest": ("registry.ollama.ai", "library", "tiny", "latest"),
        "me/tiny:q8": ("registry.ollama.ai", "me", "tiny", "q8"),
        "hf.co/bartowski/Tiny-GGUF:Q4_K_M": ("hf.co", "bartowski", "Tiny-GGUF", "Q4_K_M"),
        "localhost:5000/team/mymodel:v1": ("localhost:5000", "team", "mymodel", "v1"),
        "example.com/team/mymodel:latest": ("example.com", "team", "mymodel", "latest"),
    }
    blobs = {f"ollama:{name}": ollama_model(models, parts, source)
             for name, parts in expected.items()}
    ollama_model(models, ("registry.ollama.ai", "library", "my model", "latest"), source)
    ollama_model(models, ("registry.ollama.ai", "team.x", "tiny", "latest"), source)
    listed = {m.name: m.path for m in list_local_models() if m.source == "ollama"}
    assert listed == blobs  # folders Ollama would not name (a space, '.' in a namespace): left out
    for name, blob in listed.items():
        assert locate(name) == (blob, "ollama"), name
    assert main(["models", "--json"]) == 0
    rows = {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert set(blobs) <= rows and "ollama:my model:latest" not in rows


@pytest.mark.parametrize(("name", "why"), [
    ("ollama:", "the model is empty"),
    ("ollama:x:", "the tag is empty"),
    ("ollama:a//b", "the namespace is empty"),
    ("ollama:localhost:5000/team/", "the model is empty"),
    ("ollama:/etc/passwd", "an absolute path"),
    ("ollama:../../etc/passwd", "4 '/'-separated parts, at most 3"),
    ("ollama:a/b/c/d", "4 '/'-separated parts, at most 3"),
    ("ollama:library/../x", "the namespace '..' breaks Ollama's rule"),
    ("ollama:x:../y", "the namespace 'x:..' breaks Ollama's rule"),
    ("ollama:..", "the model '..' breaks Ollama's rule"),
    ("ollama:x\0y", "the model 'x\\x00y' breaks Ollama's rule"),
    ("ollama:x\\y", "the model 'x\\\\y' breaks Ollama's rule"),
    ("ollama:" + "a" * 81, "the model is 81 characters, more than 80"),
    ("ollama:x:" + "7" * 81, "the tag is 81 characters, more than 80"),
])
def test_a_bad_ollama_name_is_refused_saying_what_is_wrong(stores, name, why):
    with pytest.raises(ModelNotFoundError, match="not an Ollama model name") as refused:
        locate(name)
    assert why in str(refused.value)
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_ollama_name(name.removeprefix("ollama:"))


def test_a_manifest_with_a_bad_digest_is_refused(stores):
    _, models = stores
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / "bad" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:../../../x"}]}))
    with pytest.raises(ModelNotFoundError, match="digest"):
        locate("ollama:bad")


def test_the_listing_shows_every_store(stores, tmp_path, capsys):
    cache, models = stores
    snapshot = hf_snapshot(cache, "org/tiny-GGUF")
    write_gguf(snapshot / "tiny-q8_0.gguf", arch="qwen3")
    ollama_model(models, ("registry.ollama.ai", "library", "tiny", "latest"),
                 write_gguf(tmp_path / "src.gguf", arch="llama"))
    found = {m.name: m for m in list_local_models()}
    assert found["org/tiny-GGUF:tiny-q8_0.gguf"].architecture == "qwen3"
    assert found["org/tiny-GGUF:tiny-q8_0.gguf"].format == "Q8_0"
    assert found["ollama:tiny:latest"].source == "ollama"
    assert found["ollama:tiny:latest"].architecture == "llama"
    assert found[DEFAULT_MODEL].source == "embedded"
    for name, model in found.items():
        assert locate(name)[0] == model.path  # every listed name resolves to what was listed
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    assert "ollama:tiny:latest" in table and "qwen3" in table and "SOURCE" in table
    assert main(["models", "--json"]) == 0
    assert {row["name"] for row in json.loads(capsys.readouterr().out)} == set(found)


@pytest.mark.parametrize("manifest", [
    {"layers": {"mediaType": "application/vnd.ollama.image.model"}},  # an object, not a list
    {"layers": "application/vnd.ollama.image.model"},
    {"layers": [1, None, "x"]},
    {"layers": [{"mediaType": ["application/vnd.ollama.image.model"], "digest": "sha256:"}]},
    [{"layers": []}],
    {"layers": [{"mediaType": "application/vnd.ollama.image.model",
                 "digest": "sha256:" + "0" * 64}], "pad": "x" * (1 << 20)},  # too large to read
])
def test_a_manifest_of_the_wrong_json_types_is_refused_and_not_listed(stores, manifest):
    _, models = stores
    path = models / "manifests" / "registry.ollama.ai" / "library" / "odd" / "latest"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    with pytest.raises(ModelNotFoundError, match="not an Ollama manifest with a model layer"):
        locate("ollama:odd")
    assert "ollama:odd:latest" not in {m.name for m in list_local_models()}


def test_a_name_too_long_for_the_file_system_is_a_miss(stores):
    _, models = stores
    (models / "manifests" / "registry.ollama.ai" / "library").mkdir(parents=True)
    for name in ("a" * 300, "ollama:" + "a" * 300, "x/" + "b" * 300, "a\0b"):
        with pytest.raises(ModelNotFoundError, match="not found"):
            locate(name)


def test_a_broken_link_in_the_hf_cache_is_not_a_model(stores):
    cache, _ = stores
    snapshot = hf_snapshot(cache, "org/half-GGUF")  # a blob deleted from under its snapshot
    (snapshot / "half-q4_k_m.gguf").symlink_to(snapshot.parent.parent / "blobs" / "gone")
    with pytest.raises(ModelNotFoundError, match="GGUF files: none"):
        locate("org/half-GGUF")
    write_gguf(snapshot / "half-q8_0.gguf")
    assert locate("org/half-GGUF") == (snapshot / "half-q8_0.gguf", "huggingface")


@pytest.mark.parametrize("config", ["[1, 2]", '{"model_type": 5, "torch_dtype": ["f"]}', "nul"])
def test_an_odd_config_is_listed_without_details(stores, capsys, config):
    cache, _ = stores
    (hf_snapshot(cache, "org/odd") / "config.json").write_text(config)
    found = {m.name: m for m in list_local_models()}
    assert (found["org/odd"].architecture, found["org/odd"].format) == (None, None)
    assert main(["models"]) == 0 and "org/odd" in capsys.readouterr().out


def test_a_hub_id_without_an_organization_resolves_as_it_is_listed(stores):
    cache, _ = stores  # the hub's oldest models (gpt2, bert-base-uncased) have no organization
    snapshot = hf_snapshot(cache, "gpt2")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert "gpt2" in {m.name for m in list_local_models()}
    assert locate("gpt2") == (snapshot, "huggingface")


def test_a_quantization_pick_is_not_ambiguous_with_its_longer_variants(stores):
    cache, _ = stores  # bartowski's repositories: Q6_K beside Q6_K_L, Q4_0 beside Q4_0_4_4
    snapshot = hf_snapshot(cache, "org/tiny-GGUF")
    names = ["tiny-Q6_K.gguf", "tiny-Q6_K_L.gguf", "tiny-Q4_0.gguf", "tiny-Q4_0_4_4.gguf",
             "tiny.Q8_0.gguf"]
    for name in names:
        write_gguf(snapshot / name)
    for pick, name in [("Q6_K", "tiny-Q6_K.gguf"), ("q6_k_l", "tiny-Q6_K_L.gguf"),
                       ("Q4_0", "tiny-Q4_0.gguf"), ("Q4_0_4_4", "tiny-Q4_0_4_4.gguf"),
                       ("q8_0", "tiny.Q8_0.gguf"), ("tiny-Q6_K", "tiny-Q6_K.gguf")]:
        assert locate(f"org/tiny-GGUF:{pick}") == (snapshot / name, "huggingface"), pick
    with pytest.raises(ModelNotFoundError, match="no single .gguf matches 'Q6'"):
        locate("org/tiny-GGUF:Q6")  # a part of two quantizations: still ambiguous


def test_a_local_folder_that_is_no_model_does_not_hide_the_cached_hub_id(stores, tmp_path,
                                                                         monkeypatch):
    cache, _ = stores
    snapshot = hf_snapshot(cache, "org/tiny")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "cwd" / "org" / "tiny").mkdir(parents=True)  # e.g. notes kept under that name
    monkeypatch.chdir(tmp_path / "cwd")
    assert locate("org/tiny") == (snapshot, "huggingface")
    with pytest.raises(ModelNotFoundError) as miss:  # neither: the error names both places
        locate("org/other")
    (tmp_path / "cwd" / "org" / "other").mkdir()
    with pytest.raises(ModelNotFoundError) as miss:
        locate("org/other")
    assert "has no config.json" in str(miss.value) and "no snapshot of org/other" in str(miss.value)


@pytest.mark.parametrize("variables, expected", [
    ({"HF_HUB_CACHE": "{tmp}/a"}, "{tmp}/a"),
    ({"HUGGINGFACE_HUB_CACHE": "{tmp}/legacy"}, "{tmp}/legacy"),
    ({"HF_HUB_CACHE": "{tmp}/a", "HUGGINGFACE_HUB_CACHE": "{tmp}/legacy"}, "{tmp}/a"),
    ({"HF_HOME": "{tmp}/home"}, "{tmp}/home/hub"),
    ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/huggingface/hub"),
    ({"HF_HOME": "{tmp}/home", "XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/home/hub"),
    ({"HF_HOME": "$AGENTRT_TEST_ROOT/home"}, "{tmp}/home/hub"),
])
def test_the_hf_cache_is_found_as_huggingface_hub_finds_it(monkeypatch, tmp_path, variables,
                                                            expected):
    """Every variable huggingface_hub reads, in its order, ``$VARS`` expanded: a user with
    only ``XDG_CACHE_HOME`` (or the legacy ``HUGGINGFACE_HUB_CACHE``) set finds their cache."""
    from agentrt import env

    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTRT_TEST_ROOT", str(tmp_path))
    for name, value in variables.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    assert env.hf_hub_cache() == Path(expected.format(tmp=tmp_path))


def test_a_model_found_by_name_that_cannot_load_is_named_as_the_user_wrote_it(stores, tmp_path):
    """An Ollama model's blob is a file called sha256-…: the error names ``ollama:NAME`` as
    well as the file, so a user knows which of their models it is."""
    from agentrt.models import UnsupportedModelError, load_model

    _, models = stores
    blob = ollama_model(models, ("registry.ollama.ai", "library", "oldarch", "2b"),
                        write_gguf(tmp_path / "src.gguf", arch="gpt2"))
    with pytest.raises(UnsupportedModelError) as info:
        load_model("ollama:oldarch:2b")
    message = str(info.value)
    assert message.startswith("ollama:oldarch:2b") and "'gpt2'" in message, message
    assert blob.name in message, message
