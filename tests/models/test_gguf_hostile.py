"""GGUF files as a careless user or an attacker hands them over: each is opened the way users
do (``LLMEngine(EngineConfig(model=path))``) and must end in a ``ValueError`` (agentrt's
``UnsupportedModelError`` is one; a folder named like a file is a ``ModelNotFoundError``)
whose message names the file and what is wrong -- never a crash, never a hang -- leaving
nothing in the cache, and a good file must still load in the same process afterwards.

The cases: not a GGUF at all (empty, text, random bytes, a folder named ``x.gguf``, another
version); a file cut short in its header, metadata, tensor list or tensor data, or whose
array length runs past its end; tensors whose shapes disagree with the metadata (a wider
``attn_q``, ``ffn_down`` of another inner size, a wrong embedding width or norm length, a
3-D weight), a missing weight, an extra one (refused, naming it: a tensor agentrt has no
place for means the file is not the model its metadata says); a RoPE factor vector (Llama
3.1's ``rope_freqs``) of the wrong length or type, holding zero, a negative number or NaN, or
in an architecture that reads none (Qwen2), Phi-3's in a llama file; a RoPE scaling in the
metadata of an unknown type, ``longrope`` without its vectors, ``yarn`` beside a vector, a
factor of 0, NaN or text, an original context of 2**40; a k-quant row that is not
whole blocks, a format the kernels do not run (named), a type id no one knows; absurd
metadata (head counts 0 or not dividing, context 0 or 2**40, layer count 2**31, a vocabulary
that disagrees with the embedding, negative or non-finite RoPE base, negative norm epsilon,
unknown ``general.architecture``, a number stored as text); a tokenizer missing or
inconsistent (more tokens than embedding rows, eos naming no token or stored as text, token
types not one per token, a merge of tokens it does not have, an unknown tokenizer model).

All cases run in one subprocess (``_main``), one after another, each reported as one JSON
line before the next starts: a segfault or a hang fails the cases it did not reach, and
pytest survives it. Last, ``agentrt models`` lists them all from an Ollama store.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf_models import random_blocks, tiny_tokenizer

H, F, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 256, 512, 4, 2, 64, 512
HEADER: dict[str, object] = {
    "context_length": 512, "embedding_length": H, "block_count": 1, "feed_forward_length": F,
    "attention.head_count": HEADS, "attention.head_count_kv": KV_HEADS,
    "attention.key_length": HEAD_DIM, "rope.dimension_count": HEAD_DIM,
    "rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": 1e-5}
"""A one-layer llama of rows of 256 (whole k-quant blocks) and the tiny 512-token tokenizer."""


def shapes() -> dict[str, tuple[int, ...]]:
    """The GGUF tensors of :data:`HEADER`'s model, (out, in) as torch writes them."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return {"token_embd.weight": (VOCAB, H), "output_norm.weight": (H,),
            "output.weight": (VOCAB, H), "blk.0.attn_norm.weight": (H,),
            "blk.0.ffn_norm.weight": (H,), "blk.0.attn_q.weight": (q, H),
            "blk.0.attn_k.weight": (kv, H), "blk.0.attn_v.weight": (kv, H),
            "blk.0.attn_output.weight": (H, q), "blk.0.ffn_gate.weight": (F, H),
            "blk.0.ffn_up.weight": (F, H), "blk.0.ffn_down.weight": (H, F)}


def write(path: Path, *, arch: str = "llama", header: dict | None = None,
          tensors: dict | None = None, formats: dict | None = None,
          tokenizer: Callable = tiny_tokenizer) -> Path:
    """A GGUF file of :data:`HEADER` with ``header`` keys changed (None drops one), ``tensors``
    shapes changed (None drops one, new names add one, an array is written as it is) and
    ``formats`` (tensor -> type name) in place of Q8_0. A declared shape that is not whole
    blocks gets the bytes the reader computes for it."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("hostile")
    for key, value in {**HEADER, **(header or {})}.items():
        if value is None:
            continue
        add = (writer.add_float32 if isinstance(value, float) else writer.add_string
               if isinstance(value, str) else writer.add_int32 if value < 0
               else writer.add_uint64)
        add(f"{arch}.{key}", value)
    tokenizer(writer, gguf)
    rng = np.random.default_rng(0)
    for name, shape in {**shapes(), **(tensors or {})}.items():
        if shape is None:
            continue
        if isinstance(shape, np.ndarray):
            writer.add_tensor(name, shape)
            continue
        kind = gguf.GGMLQuantizationType[(formats or {}).get(
            name, "F32" if len(shape) == 1 else "Q8_0")]
        block, size = gguf.GGML_QUANT_SIZES[kind]
        if kind.name == "F32":
            writer.add_tensor(name, np.ones(shape, dtype=np.float32))
        elif shape[-1] % block == 0 and len(shape) == 2:
            writer.add_tensor(name, random_blocks(*shape, kind, rng), raw_dtype=kind)
        else:  # int8, not uint8: the writer takes the shape as declared
            nbytes = math.prod(shape) * size // block
            writer.add_tensor(name, np.zeros(nbytes, dtype=np.int8), raw_shape=shape,
                              raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def patched(path: Path, anchor: bytes, skip: int, fmt: str, value: int) -> Path:
    """``path`` with the ``fmt`` (struct) value ``skip`` bytes after ``anchor`` set to
    ``value``: a header field changed by hand."""
    import struct

    data = bytearray(path.read_bytes())
    at = data.index(anchor) + len(anchor) + skip
    struct.pack_into(fmt, data, at, value)
    path.write_bytes(bytes(data))
    return path


def cut(path: Path, at: int | bytes, skip: int = 0) -> Path:
    """``path`` cut short at byte ``at`` (or ``skip`` bytes after where ``at`` first occurs)."""
    data = path.read_bytes()
    path.write_bytes(data[: at if isinstance(at, int) else data.index(at) + skip])
    return path


def _with_tokens(**changes) -> Callable:
    """:func:`tiny_tokenizer` with some of its keys replaced (``eos_token_id=9999``)."""
    def tokenizer(writer, gguf) -> None:
        tiny_tokenizer(writer, gguf)
        for key, value in changes.items():
            old = writer.kv_data[0][f"tokenizer.ggml.{key}"]
            writer.kv_data[0][f"tokenizer.ggml.{key}"] = gguf.GGUFValue(value, old.type,
                                                                          old.sub_type)
    return tokenizer


def _bos_as_text(writer, gguf) -> None:
    tiny_tokenizer(writer, gguf)
    writer.kv_data[0]["tokenizer.ggml.bos_token_id"] = gguf.GGUFValue(
        "one", gguf.GGUFValueType.STRING)


def _rope_freqs(at: int = 0, value: float = 1.0, n: int = HEAD_DIM // 2) -> dict:
    """``tensors`` adding a ``rope_freqs`` vector of ``n`` ones, ``value`` at ``at``."""
    factors = np.ones(n, dtype=np.float32)
    factors[at] = value
    return {"rope_freqs.weight": factors}


def _scaling(kind: str, factor: object = 4.0, **keys) -> dict:
    """``header`` keys naming a ``kind`` RoPE scaling of ``factor`` (original context 64)."""
    return {"rope.scaling.type": kind, "rope.scaling.factor": factor,
            "rope.scaling.original_context_length": 64, **keys}


def _text(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


# name: (how the file is made from a path, words the error must hold)
CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    # not a GGUF at all
    "empty": (lambda p: _text(p, b""), "not a GGUF file (empty)"),
    "text": (lambda p: _text(p, b"# my model\nweights: see the link\n"), "not a GGUF file"),
    "random_bytes": (lambda p: _text(p, np.random.default_rng(1).bytes(4096)), "not a GGUF"),
    "folder": (_folder, "is a folder, not a .gguf file"),
    "version_9": (lambda p: patched(write(p), b"GGUF", 0, "<I", 9), "GGUF version 9"),
    # cut short
    "cut_in_header": (lambda p: cut(write(p), 20), "not a GGUF file (20 bytes)"),
    "cut_in_metadata": (lambda p: cut(write(p), b"tokenizer.ggml.tokens", 100), "truncated"),
    "cut_in_tensor_list": (lambda p: cut(write(p), b"blk.0.ffn_up"), "truncated"),
    "cut_in_tensor_data": (lambda p: cut(write(p), p.stat().st_size - 5000), "truncated"),
    "array_past_the_end": (lambda p: patched(patched(write(p), b"tokenizer.ggml.token_type",
                                                     4, "<I", 0), b"tokenizer.ggml.token_type",
                                             8, "<Q", 1 << 60), "truncated"),  # 2**60 uint8
    # tensors that disagree with the metadata
    "attn_q_wider": (lambda p: write(p, tensors={"blk.0.attn_q.weight": (384, H)}),
                     "'blk.0.attn_q.weight' (model.layers.0.self_attn.q_proj.weight) has "
                     "shape [384, 256]; the model's metadata needs [256, 256]"),
    "ffn_down_inner": (lambda p: write(p, tensors={"blk.0.ffn_down.weight": (H, 256)}),
                       "'blk.0.ffn_down.weight'"),
    "embedding_width": (lambda p: write(p, tensors={"token_embd.weight": (VOCAB, 512)}),
                        "'token_embd.weight'"),
    "norm_length": (lambda p: write(p, tensors={"blk.0.attn_norm.weight": (128,)}),
                    "'blk.0.attn_norm.weight'"),
    "weight_3d": (lambda p: write(p, tensors={"blk.0.attn_v.weight": (2, 64, H)}),
                  "'blk.0.attn_v.weight'"),
    "missing_ffn_up": (lambda p: write(p, tensors={"blk.0.ffn_up.weight": None}),
                       "model.layers.0.mlp.up_proj.weight is missing"),
    "extra_tensor": (lambda p: write(p, tensors={"blk.0.mystery.weight": (H,)}),
                     "unexpected GGUF tensor 'blk.0.mystery.weight'"),
    "extra_layer": (lambda p: write(p, tensors={"blk.1.attn_norm.weight": (H,)}),
                    "unexpected GGUF tensor 'blk.1.attn_norm.weight'"),
    "rope_freqs_short": (lambda p: write(p, tensors=_rope_freqs(n=HEAD_DIM // 2 - 1)),
                         "'rope_freqs.weight' has 31 values; a head of 64 needs 32"),
    "rope_freqs_zero": (lambda p: write(p, tensors=_rope_freqs(5, 0.0)),
                        "'rope_freqs.weight' holds 0.0 at 5"),
    "rope_freqs_negative": (lambda p: write(p, tensors=_rope_freqs(31, -8.0)),
                            "'rope_freqs.weight' holds -8.0 at 31"),
    "rope_freqs_nan": (lambda p: write(p, tensors=_rope_freqs(0, float("nan"))),
                       "'rope_freqs.weight' holds nan at 0"),
    "rope_freqs_q8_0": (lambda p: write(p, tensors={"rope_freqs.weight": (HEAD_DIM // 2,)},
                                        formats={"rope_freqs.weight": "Q8_0"}),
                        "'rope_freqs.weight' is a Q8_0 tensor of shape [32]; llama.cpp reads "
                        "an F32 vector"),
    "rope_freqs_in_qwen2": (lambda p: write(p, arch="qwen2", tensors=_rope_freqs()),
                            "unexpected GGUF tensor 'rope_freqs.weight'"),
    "phi3_factors_in_llama": (lambda p: write(p, tensors={
        "rope_factors_long.weight": np.ones(HEAD_DIM // 2, dtype=np.float32)}),
        "unexpected GGUF tensor 'rope_factors_long.weight'"),
    "scaling_unknown": (lambda p: write(p, header=_scaling("ntk-by-parts")),
                        "RoPE scaling 'ntk-by-parts' (llama.rope.scaling.type) is not "
                        "supported"),
    "scaling_longrope_alone": (lambda p: write(p, header=_scaling("longrope")),
                               "without its factor tensors"),
    "scaling_yarn_and_rope_freqs": (lambda p: write(p, header=_scaling("yarn"),
                                                    tensors=_rope_freqs()),
                                    "['rope_freqs.weight'] and a 'yarn' RoPE scaling"),
    "scaling_factor_0": (lambda p: write(p, header=_scaling("linear", 0.0)),
                         "llama.rope.scaling.factor = 0.0 (expected a finite number above 0)"),
    "scaling_factor_nan": (lambda p: write(p, header=_scaling("yarn", float("nan"))),
                           "llama.rope.scaling.factor = nan"),
    "scaling_factor_text": (lambda p: write(p, header=_scaling("linear", "four")),
                            "llama.rope.scaling.factor = 'four'"),
    "scaling_yarn_context_2_40": (lambda p: write(p, header=_scaling(
        "yarn", **{"rope.scaling.original_context_length": 1 << 40})),
        f"llama.rope.scaling.original_context_length = {1 << 40}"),
    "kquant_partial_block": (lambda p: write(
        p, header={"embedding_length": 384}, formats={"blk.0.attn_q.weight": "Q4_K"},
        tensors={"blk.0.attn_q.weight": (256, 384)}), "whole blocks of 256"),
    "iq2_xxs": (lambda p: write(p, formats={"blk.0.ffn_up.weight": "IQ2_XXS"}),
                "'blk.0.ffn_up.weight' (model.layers.0.mlp.up_proj.weight) is stored as "
                "IQ2_XXS"),
    "type_id_200": (lambda p: patched(write(p), b"blk.0.attn_k.weight", 4 + 16, "<I", 200),
                    "'blk.0.attn_k.weight' is stored as GGML type 200"),
    # absurd metadata
    "heads_0": (lambda p: write(p, header={"attention.head_count": 0}),
                "num_attention_heads = 0"),
    "kv_heads_0": (lambda p: write(p, header={"attention.head_count_kv": 0}),  # 0 = heads
                   "'blk.0.attn_k.weight'"),
    "heads_not_dividing_hidden": (lambda p: write(p, header={
        "attention.head_count": 3, "attention.head_count_kv": 3, "attention.key_length": None,
        "rope.dimension_count": None}), "hidden size 256 is not a multiple of 3"),
    "kv_heads_not_dividing": (lambda p: write(p, header={"attention.head_count_kv": 3}),
                              "not a multiple of 3 key/value heads"),
    "heads_vs_tensors": (lambda p: write(p, header={"attention.head_count": 8}),
                         "'blk.0.attn_q.weight'"),
    "odd_head_dim": (lambda p: write(p, header={"attention.key_length": 63,
                                                "rope.dimension_count": 63}), "must be even"),
    "context_0": (lambda p: write(p, header={"context_length": 0}),
                  "max_position_embeddings = 0"),
    "context_2_40": (lambda p: write(p, header={"context_length": 1 << 40}),
                     f"max_position_embeddings = {1 << 40}"),
    "layers_2_31": (lambda p: write(p, header={"block_count": 1 << 31}),
                    f"num_hidden_layers = {1 << 31}"),
    "layers_2_missing": (lambda p: write(p, header={"block_count": 2}),
                         "model.layers.1.input_layernorm.weight is missing"),
    "no_hidden_size": (lambda p: write(p, header={"embedding_length": None}), "hidden_size"),
    "no_ffn_size": (lambda p: write(p, header={"feed_forward_length": None}),
                    "intermediate_size = None"),
    "sliding_window_negative": (lambda p: write(p, header={"attention.sliding_window": -4}),
                                "sliding_window = -4"),
    "heads_as_text": (lambda p: write(p, header={"attention.head_count": "four"}), "four"),
    "vocab_vs_embedding": (lambda p: write(p, header={"vocab_size": 1000}),
                           "'token_embd.weight'"),
    "rope_negative": (lambda p: write(p, header={"rope.freq_base": -10000.0}),
                      "rope_theta (rope.freq_base) = -10000.0"),
    "rope_infinite": (lambda p: write(p, header={"rope.freq_base": float("inf")}),
                      "rope_theta (rope.freq_base) = inf"),
    "eps_negative": (lambda p: write(p, header={"attention.layer_norm_rms_epsilon": -1.0}),
                     "rms_norm_eps = -1.0"),
    "arch_gpt2": (lambda p: write(p, arch="gpt2"), "GGUF architecture 'gpt2' is not supported"),
    "arch_made_up": (lambda p: write(p, arch="skynet"), "'skynet' is not supported"),
    # the tokenizer
    "no_tokenizer": (lambda p: write(p, tokenizer=lambda w, g: None), "has no tokenizer"),
    "more_tokens_than_rows": (lambda p: write(p, tensors={"token_embd.weight": (256, H),
                                                          "output.weight": (256, H)}),
                              "512 tokens; the token embedding has rows for 256"),
    "eos_out_of_range": (lambda p: write(p, tokenizer=_with_tokens(eos_token_id=9999)),
                         "eos_token_id = 9999"),
    "bos_as_text": (lambda p: write(p, tokenizer=_bos_as_text), "bos_token_id = 'one'"),
    "token_types_short": (lambda p: write(p, tokenizer=_with_tokens(token_type=[1] * 10)),
                          "tokenizer.ggml.token_type has 10 entries for 512 tokens"),
    "merge_of_unknown_tokens": (lambda p: write(p, tokenizer=_with_tokens(merges=["zz qq"])),
                                "tokenizer cannot be read"),
    "tokenizer_model_unknown": (lambda p: write(p, tokenizer=_with_tokens(model="nonsense")),
                                "tokenizer cannot be read"),
}


def _open(path: Path) -> None:
    """Open ``path`` as users do and generate a few tokens."""
    from agentrt import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(EngineConfig(model=str(path), num_blocks=8))
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()


def _main(folder: Path, names: list[str]) -> None:
    """The subprocess: each case, then a good file, one JSON line each."""
    from agentrt import ModelNotFoundError

    for name in [*names, "good"]:
        print(json.dumps({"start": name}), flush=True)
        path = folder / f"{name}.gguf"  # NOTE: one name each: the cache is keyed by name, size
        try:
            _open(write(path) if name == "good" else CASES[name][0](path))
            report = {"case": name, "error": None}
        except Exception as exc:  # noqa: BLE001 - reported to the test, which judges it
            report = {"case": name, "error": type(exc).__name__, "message": str(exc),
                      "is_clear": isinstance(exc, ValueError | ModelNotFoundError)}
        print(json.dumps(report), flush=True)
    print(json.dumps({"start": "listing"}), flush=True)
    print(json.dumps({"listing": _listing(folder)}), flush=True)


def _listing(folder: Path) -> dict[str, list]:
    """``agentrt models`` over an Ollama store holding every file written: name -> (arch,
    format)."""
    import hashlib

    from agentrt.models.sources import list_local_models

    store = folder / "ollama"
    (store / "blobs").mkdir(parents=True)
    for path in folder.glob("*.gguf"):
        if not path.is_file():
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        (store / "blobs" / f"sha256-{digest}").write_bytes(path.read_bytes())
        manifest = store / "manifests" / "registry.ollama.ai" / "library" / path.stem / "latest"
        manifest.parent.mkdir(parents=True)
        layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}
        manifest.write_text(json.dumps({"layers": [layer]}))
    os.environ["OLLAMA_MODELS"] = str(store)
    return {m.name.removeprefix("ollama:").removesuffix(":latest"): [m.architecture, m.format]
            for m in list_local_models() if m.source == "ollama"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """Run every case in one subprocess; its reports by case, plus how it ended."""
    from agentrt import env

    root = tmp_path_factory.mktemp("hostile")
    (root / "cache").mkdir()
    kernels = env.cache_dir() / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    (root / "cache" / "kernels").symlink_to(kernels)
    (root / "files").mkdir()
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from test_gguf_hostile import _main; from pathlib import Path; "
            f"_main(Path({str(root / 'files')!r}), {sorted(CASES)!r})")
    env_vars = {**os.environ, "AGENTRT_CACHE": str(root / "cache"),
                "HF_HUB_CACHE": str(root / "hub")}  # an empty one: the listing reads it
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=240, env=env_vars)
        out, end = done.stdout, f"exit code {done.returncode}"
    except subprocess.TimeoutExpired as exc:
        out, end = (exc.stdout or b"").decode(), "a hang (killed after 240 s)"
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    found = {r["case"]: r for r in lines if "case" in r}
    found.update(("listing", r["listing"]) for r in lines if "listing" in r)
    started = [r["start"] for r in lines if "start" in r]
    last = started[-1] if started and started[-1] not in found else None
    return {"_found": found, "_end": {"end": end, "last": last}, "_cache": root / "cache"}


def _report(reports: dict, name: str) -> dict:
    found, end = reports["_found"], reports["_end"]
    assert name in found, (f"the subprocess ended ({end['end']}) during case {end['last']!r} "
                           f"and never reached {name!r}")
    return found[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_file_ends_in_a_clear_value_error(reports, name):
    report = _report(reports, name)
    assert report["error"] is not None, f"{name}: the file loaded and ran"
    assert report["is_clear"], f"{name}: {report['error']}: {report['message']}"
    assert f"{name}.gguf" in report["message"], report["message"]
    assert CASES[name][1] in report["message"], report["message"]


def test_a_good_file_still_loads_after_all_of_them(reports):
    """... and the refused files left nothing in the cache: only the good file's folder."""
    report = _report(reports, "good")
    assert report["error"] is None, f"{report['error']}: {report['message']}"
    folders = [p.name for p in (reports["_cache"] / "models").iterdir()]
    assert len(folders) == 1 and folders[0].startswith("good-"), folders


def test_agentrt_models_lists_them_without_details_instead_of_hanging(reports):
    """A file with no readable header (cut short, not a GGUF, an array past its end) is
    listed with no architecture or format; the others say what they claim to be."""
    listing = _report(reports, "listing")
    unreadable = {"empty", "text", "random_bytes", "version_9", "cut_in_header",
                  "cut_in_metadata", "cut_in_tensor_list", "cut_in_tensor_data",
                  "array_past_the_end", "type_id_200", "kquant_partial_block"}
    assert set(listing) == set(CASES) - {"folder"} | {"good"}
    for name, (arch, fmt) in listing.items():
        if name in unreadable:
            assert (arch, fmt) == (None, None), name
        else:
            assert arch in ("llama", "qwen2", "gpt2", "skynet"), (name, arch)
    assert listing["good"] == ["llama", "Q8_0"]
