"""A GGUF model file as it is stored: its Hugging Face config and where each weight's bytes are.

:class:`GGUFFile` reads the header (:func:`~agentrt.models.gguf_header.read_header`) into a
Hugging Face ``config.json`` dict (keys named by transformers' ``GGUF_CONFIG_MAPPING``) and one
:class:`GGUFTensor` per weight under its Hugging Face name (the ``gguf`` package's
per-architecture name map). Nothing else is read until asked:
:meth:`GGUFTensor.read_into` reads one tensor's bytes into memory the caller owns, undoing
llama.cpp's interleaving of Q/K rows on the way, so a model kept in the file's own block formats
takes about the file's size in memory and no file pages stay mapped.

Architectures (``general.architecture``): ``llama`` (Mistral files are ``llama`` too, told apart
by their ``general.name``, as transformers does), ``qwen2``, ``qwen3`` and ``phi3`` (Phi-3 and
Phi-3.5 files: Q/K/V rows fused in ``attn_qkv``, gate and up rows in ``ffn_up``, in
Hugging Face's order, so they are named ``qkv_proj`` / ``gate_up_proj`` as its Phi-3 folders
are; the token that ends a chat turn, the file's ``eot_token_id`` or else ``<|end|>`` as
llama.cpp finds it, stops generation as eos does). The config's ``rope_scaling`` is what the
file's RoPE factor vectors (Phi-3's, Llama 3.1+'s ``rope_freqs``) or its RoPE scaling metadata
stand for (:mod:`agentrt.models.gguf_rope`).

NOTE: a file is checked before any of it reaches the C kernels, which read weight bytes through
raw pointers: :func:`~agentrt.models.gguf_header.read_header` walks the header with bounds
checks before it reads it, a tensor the model has no place for is refused here,
and :mod:`agentrt.models.gguf_checks` checks the metadata's sizes, every weight's shape and the
vocabulary. Each failure is a ``ValueError`` naming the file, the tensor or key, and what was
expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agentrt.models.config import UnsupportedModelError
from agentrt.models.gguf_checks import check_config, check_tensors, check_tokens
from agentrt.models.gguf_header import read_header
from agentrt.models.gguf_moe import (
    MOE_ARCHITECTURES,
    check_moe_config,
    moe_config,
    moe_tensor_names,
)
from agentrt.models.gguf_rope import ROPE_FACTORS, factor_vector, rope_scaling

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

__all__ = ["GGUF_ARCHITECTURES", "GGUFFile", "GGUFTensor"]

#: GGUF ``general.architecture`` -> the Hugging Face architecture it runs as
GGUF_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "qwen2moe": "Qwen2MoeForCausalLM",  # mixture of experts: agentrt.models.gguf_moe
    "qwen3moe": "Qwen3MoeForCausalLM",
}
_GEMMA = frozenset({"gemma3"})  # norms stored as 1 + weight; four norms a layer
_INTERLEAVED_QK = frozenset({"llama"})  # llama.cpp interleaves rotary halves of Q/K rows here
_FUSED = frozenset({"phi3"})  # one tensor for Q/K/V rows, one for gate/up rows
_FLOAT_TYPES = {"F32": 4, "F16": 2, "BF16": 2}  # element-wise types: a 1-D tensor's rows


@dataclass(frozen=True)
class GGUFTensor:
    """One weight of a GGUF file, not read yet: where its bytes are, their format and shape."""

    path: Path
    name: str
    """The tensor's name in the file (``blk.0.attn_q.weight``)."""
    qtype: GGMLQuantizationType
    """Its block format."""
    shape: tuple[int, ...]
    """Row-major, outermost first as torch and Hugging Face write it: (out, in) for a matrix."""
    offset: int
    nbytes: int
    interleaved_heads: int = 0
    """llama.cpp interleaved the rotary halves of this many heads' rows (0 = rows as in HF)."""
    value_offset: float = 0.0
    """Added to the stored values to give Hugging Face's (-1: a Gemma norm stored as 1 + w)."""

    @property
    def rows(self) -> int:
        """Rows of the stored form: the outer dims of a matrix, the elements of a float vector."""
        if len(self.shape) == 1 and self.qtype.name in _FLOAT_TYPES:
            return self.shape[0]
        return math.prod(self.shape[:-1])

    @property
    def row_bytes(self) -> int:
        return self.nbytes // self.rows

    def read_into(self, out: torch.Tensor) -> torch.Tensor:
        """Read the bytes into ``out`` (contiguous uint8, ``(rows, row_bytes)``) in HF row order."""
        if out.dtype != torch.uint8 or not out.is_contiguous() or out.numel() != self.nbytes:
            raise ValueError(f"{self.name}: needs a contiguous uint8 buffer of {self.nbytes} "
                             f"bytes, got {out.dtype} {tuple(out.shape)}")
        view = memoryview(out.numpy()).cast("B")
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.offset)
            done = 0
            while done < self.nbytes:
                n = f.readinto(view[done:])
                if not n:
                    raise ValueError(f"{self.path}: truncated GGUF file (tensor {self.name})")
                done += n
        if self.interleaved_heads:
            rows = out.view(self.rows, self.row_bytes)
            rows.copy_(_unpermute(rows.clone(), self.interleaved_heads))
        return out

    def read(self) -> torch.Tensor:
        """The stored bytes as a new uint8 tensor ``(rows, row_bytes)``, in HF row order."""
        return self.read_into(torch.empty(self.rows, self.row_bytes, dtype=torch.uint8))

    def dequantize(self) -> torch.Tensor:
        """The values as float32 of :attr:`shape`, by the ``gguf`` package's reference."""
        import gguf

        values = gguf.quants.dequantize(self.read().numpy(), self.qtype)
        values = torch.from_numpy(values.astype("float32", copy=False).reshape(self.shape))
        return values + self.value_offset if self.value_offset else values


class GGUFFile:
    """The header of a GGUF model file: ``config`` (HF config.json) and ``tensors`` by HF name.

    Raises :class:`~agentrt.models.config.UnsupportedModelError` for other architectures and
    for tensors the Llama-family forward pass has no place for, and ``ValueError`` naming the
    file and what is wrong for a broken one (see the module notes), before any weight is read.
    """

    def __init__(self, path: str | Path) -> None:
        import gguf

        self.path = Path(path)
        reader = read_header(self.path)
        meta = _metadata(reader)
        arch = str(meta.get("general.architecture"))
        if arch not in GGUF_ARCHITECTURES:
            raise UnsupportedModelError(
                f"{self.path.name}: GGUF architecture {arch!r} is not supported; agentrt runs "
                f"{', '.join(sorted(GGUF_ARCHITECTURES))} (Mistral files are 'llama')"
            )
        self.architecture = arch
        try:
            self.config = _config(meta, arch)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            if isinstance(exc, UnsupportedModelError):
                raise UnsupportedModelError(f"{self.path.name}: {exc}") from None
            why = f"nothing gives its {exc.args[0]}" if isinstance(exc, KeyError) else exc
            raise ValueError(f"{self.path}: invalid GGUF model metadata ({why})") from None
        check_config(self.path, self.config)
        if arch in MOE_ARCHITECTURES:
            check_moe_config(self.path, self.config)
        names = _hf_names(gguf, arch, self.config["num_hidden_layers"])
        self.tensors: dict[str, GGUFTensor] = {}
        factors: dict[str, list[float]] = {}
        factor_names = ROPE_FACTORS.get(arch, {})
        for t in reader.tensors:
            if t.name in factor_names:
                factors[factor_names[t.name]] = factor_vector(self.path, t,
                                                               self.config["head_dim"])
                continue
            if t.name not in names:
                raise UnsupportedModelError(
                    f"{self.path.name}: unexpected GGUF tensor {t.name!r} (not part of a "
                    f"{arch} model of {self.config['num_hidden_layers']} layers)")
            self.tensors[names[t.name]] = GGUFTensor(
                path=self.path, name=t.name, qtype=gguf.GGMLQuantizationType(t.tensor_type),
                shape=tuple(int(d) for d in reversed(t.shape)),  # GGUF lists dims innermost-first
                offset=int(t.data_offset), nbytes=int(t.n_bytes),
                interleaved_heads=self._interleaved_heads(t.name),
                value_offset=-1.0 if arch in _GEMMA and t.name.endswith("norm.weight") else 0.0,
            )
        try:
            scaling = rope_scaling(meta, arch, self.config, factors)
        except ValueError as exc:
            raise type(exc)(f"{self.path.name}: {exc}") from None
        if scaling is not None:
            self.config["rope_scaling"] = scaling
        if "lm_head.weight" not in self.tensors:
            self.config["tie_word_embeddings"] = True
        embed = self.tensors.get("model.embed_tokens.weight")
        if self.config["vocab_size"] is None and embed is not None and embed.shape:
            self.config["vocab_size"] = embed.shape[0]
        check_tensors(self.path, self.tensors, self.config, arch, arch in _FUSED)
        check_tokens(self.path, reader, self.config)
        self.config["eos_token_id"] = _eos_ids(reader, meta)

    def _interleaved_heads(self, name: str) -> int:
        if self.architecture not in _INTERLEAVED_QK:
            return 0
        if ".attn_q." in name:
            return int(self.config["num_attention_heads"])
        if ".attn_k." in name:
            return int(self.config["num_key_value_heads"])
        return 0


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's interleaving of rotary halves in Q/K rows (any trailing shape)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _metadata(reader) -> dict:
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key.endswith(("tokens", "scores", "merges",
                                                               "token_type")):
            continue  # the vocabulary is converted by transformers, not needed here
        try:
            meta[key] = field.contents()
        except Exception:  # noqa: BLE001 - unreadable optional metadata is skipped
            continue
    return meta


def _config(meta: dict, arch: str) -> dict[str, Any]:
    """config.json from the GGUF metadata, keys named by transformers' GGUF_CONFIG_MAPPING."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    config: dict[str, Any] = {}
    mapping = MOE_ARCHITECTURES[arch][0] if arch in MOE_ARCHITECTURES else arch
    for section, prefix in ((mapping, f"{arch}."), ("tokenizer", "tokenizer.")):
        for key, hf_key in GGUF_CONFIG_MAPPING[section].items():
            if hf_key is not None and prefix + key in meta:
                config[hf_key] = meta[prefix + key]
    heads, hidden = int(config["num_attention_heads"]), int(config["hidden_size"])
    head_dim = meta.get(f"{arch}.attention.key_length") or meta.get(f"{arch}.rope.dimension_count")
    if arch in _FUSED:  # llama.cpp writes no key_length here, and rotates part of a head
        head_dim = meta.get(f"{arch}.attention.key_length")
    if not head_dim and heads > 0 and hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of {heads} attention heads, "
                         f"and no {arch}.attention.key_length gives the head size")
    head_dim = head_dim or (hidden // heads if heads > 0 else 0)
    rotary = meta.get(f"{arch}.rope.dimension_count") or head_dim
    if rotary != head_dim:
        raise UnsupportedModelError(f"RoPE on {rotary} of each head's {head_dim} dimensions "
                                    "(partial rotary) is not supported; agentrt rotates whole "
                                    "heads")
    hf_arch = GGUF_ARCHITECTURES[arch]
    if arch == "llama" and "mistral" in str(meta.get("general.name", "")).lower():
        hf_arch = "MistralForCausalLM"
    config.update(
        architectures=[hf_arch],
        model_type=hf_arch.removesuffix("ForCausalLM").lower(),
        num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        rope_theta=float(config.get("rope_theta", 10000.0)),
        rms_norm_eps=float(config["rms_norm_eps"]),
        vocab_size=int(config.get("vocab_size") or 0) or None,
        tie_word_embeddings=False,
        torch_dtype="float32",
        attention_bias=arch in ("qwen2", "qwen2moe"),
        mlp_bias=False,
        hidden_act="silu",
        sliding_window=int(meta.get(f"{arch}.attention.sliding_window") or 0) or None,
    )
    if arch in _GEMMA:
        config.update(_gemma3_config(config))
    if arch in MOE_ARCHITECTURES:
        moe_config(meta, arch, config)
    return config


def _gemma3_config(config: dict[str, Any]) -> dict[str, Any]:
    """What a gemma3 file leaves to llama.cpp's code: five sliding layers of every six, RoPE
    base 10,000 on them, and the query scale (head_dim; hidden / heads for the 62-layer
    27B), as llama.cpp's gemma3 loader sets them."""
    layers, heads = int(config["num_hidden_layers"]), int(config["num_attention_heads"])
    scalar = config["hidden_size"] // heads if layers == 62 else config["head_dim"]
    return dict(model_type="gemma3_text", hidden_activation="gelu_pytorch_tanh",
                hidden_act="gelu_pytorch_tanh", query_pre_attn_scalar=scalar,
                rope_local_base_freq=10000.0, sliding_window=config["sliding_window"] or 4096,
                layer_types=["sliding_attention" if (i + 1) % 6 else "full_attention"
                             for i in range(layers)])


_END_OF_TURN = ("<|end|>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<end_of_turn>")
"""Tokens that end a chat turn or message (Phi-3; Llama 3.x, whose ``<|eom_id|>`` ends a
message that called a tool; ChatML; Gemma), found by text as llama.cpp finds them."""


def _eos_ids(reader, meta: dict) -> list[int]:
    """eos and the ends of a chat turn: the ids the file names (``eos``/``eot``/``eom``), and
    the :data:`_END_OF_TURN` tokens its vocabulary holds (files often name none of them: a
    Phi-3 file's ``<|end|>``, a Llama 3.1 file's ``<|eom_id|>``)."""
    ids = [int(meta[f"tokenizer.ggml.{k}_token_id"]) for k in ("eos", "eot", "eom")
           if f"tokenizer.ggml.{k}_token_id" in meta]
    if "tokenizer.ggml.tokens" in reader.fields:
        index = {t: i for i, t in enumerate(reader.fields["tokenizer.ggml.tokens"].contents())
                 if t in _END_OF_TURN}
        ids += index.values()
    return sorted(set(ids))



def _hf_names(gguf, arch: str, num_layers: int) -> dict[str, str]:
    """GGUF tensor name -> Hugging Face name, through the gguf package's name map."""
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], num_layers)
    hf = ["model.embed_tokens", "model.norm", "lm_head"]
    projections = (("self_attn.qkv_proj", "mlp.gate_up_proj") if arch in _FUSED else
                   ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
                    "mlp.up_proj"))  # NOTE: gguf maps up_proj and gate_up_proj to ffn_up both
    for i in range(num_layers):
        layer = f"model.layers.{i}."
        hf += [layer + n for n in (
            "input_layernorm", "post_attention_layernorm", "self_attn.o_proj",
            "self_attn.q_norm", "self_attn.k_norm", "mlp.down_proj", *projections,
            *moe_tensor_names(arch))]
        if arch in _GEMMA:
            hf += [layer + "pre_feedforward_layernorm", layer + "post_feedforward_layernorm"]
    names = {}
    for base in hf:
        gguf_base = name_map.get_name(base)
        if gguf_base is not None:
            for suffix in (".weight", ".bias"):
                names[gguf_base + suffix] = base + suffix
    return names
