"""GGUF files of the Llama, Mistral, Qwen2 and Qwen3 families load and match HF transformers.

Each case builds a small random model with transformers, writes it as a GGUF file the way
llama.cpp's converter does (gguf's tensor names, Q/K rows interleaved for llama, the default
model's tokenizer), and checks agentrt's engine on that file against the original model (F32
file) and against transformers' own GGUF loader on the same file (Q8_0 file).
"""

from __future__ import annotations

import pytest
import torch

from agentrt import Engine, SamplingParams
from agentrt.models.config import UnsupportedModelError
from agentrt.models.files import default_gguf

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, vocab_size=49152)
CASES = {  # name: (config class, model class, GGUF architecture, general.name, extra config)
    "llama": ("LlamaConfig", "LlamaForCausalLM", "llama", "tiny llama",
              dict(tie_word_embeddings=False)),
    "mistral": ("MistralConfig", "MistralForCausalLM", "llama", "Tiny Mistral",
                dict(tie_word_embeddings=False, sliding_window=None)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "qwen2", "tiny qwen2",
              dict(tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "qwen3", "tiny qwen3",
              dict(head_dim=32, tie_word_embeddings=False)),
}
IDS = list(range(100, 400, 3))  # 100 tokens: prefill then greedy decode


def _tokenizer_fields(writer, gguf) -> None:
    """Copy the default model's tokenizer (GPT-2 BPE, 49152 tokens) into ``writer``."""
    fields = gguf.GGUFReader(str(default_gguf())).fields

    def value(key):
        return fields[key].contents()

    writer.add_tokenizer_model(value("tokenizer.ggml.model"))
    writer.add_tokenizer_pre(value("tokenizer.ggml.pre"))
    writer.add_token_list(value("tokenizer.ggml.tokens"))
    writer.add_token_types(value("tokenizer.ggml.token_type"))
    writer.add_token_merges(value("tokenizer.ggml.merges"))
    writer.add_bos_token_id(value("tokenizer.ggml.bos_token_id"))
    writer.add_eos_token_id(value("tokenizer.ggml.eos_token_id"))
    writer.add_chat_template(value("tokenizer.chat_template"))


def _permute(w, n_head: int):
    """llama.cpp's interleaving of the rotary halves of Q/K rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def write_gguf(hf, path, arch: str, name: str, qtype=None):
    """``hf`` as a GGUF file: F32, or ``qtype`` for 2-D weights (norms and biases stay F32)."""
    import gguf

    cfg = hf.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"])
                              if getattr(cfg, "rope_parameters", None) else cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    _tokenizer_fields(writer, gguf)
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg.num_hidden_layers)
    for hf_name, tensor in hf.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        base, suffix = hf_name.rsplit(".", 1)
        data = tensor.detach().float().numpy()
        if arch == "llama" and base.endswith("q_proj"):
            data = _permute(data, cfg.num_attention_heads)
        elif arch == "llama" and base.endswith("k_proj"):
            data = _permute(data, cfg.num_key_value_heads)
        gguf_name = f"{name_map.get_name(base)}.{suffix}"
        if qtype is not None and data.ndim == 2:
            writer.add_tensor(gguf_name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(gguf_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build(case: str):
    import transformers

    config_cls, model_cls, arch, name, extra = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**SMALL, **extra)
    return getattr(transformers, model_cls)(config).eval(), arch, name


def run_engine(path):
    engine = Engine(str(path), dtype="float32", num_blocks=64, max_num_batched_tokens=32)
    try:
        out = engine.generate(IDS, SamplingParams(max_tokens=6, ignore_eos=True, logprobs=0))
        return out, engine.core.model_config.architecture
    finally:
        engine.close()


def reference(hf):
    with torch.inference_mode():
        tokens = hf.generate(torch.tensor([IDS]), max_new_tokens=6, min_new_tokens=6,
                             do_sample=False)[0, len(IDS):].tolist()
        logits = hf(torch.tensor([IDS])).logits[0, -1].log_softmax(-1)
    return tokens, logits


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRT_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_float_gguf_matches_the_model_it_came_from(case, tmp_path):
    hf, arch, name = build(case)
    out, architecture = run_engine(write_gguf(hf, tmp_path / f"{case}.gguf", arch, name))
    tokens, logits = reference(hf)
    assert architecture == CASES[case][1]
    assert out.token_ids == tokens
    first = out.token_ids[0]
    assert abs(out.logprobs[0][first] - float(logits[first])) < 1e-3


@pytest.mark.parametrize("case", ["llama", "qwen2", "qwen3"])
def test_a_q8_0_gguf_matches_transformers_reading_the_same_file(case, tmp_path):
    import gguf
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    hf, arch, name = build(case)
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    path = write_gguf(hf, tmp_path / f"{case}-q8_0.gguf", arch, name, q8_0)
    out, _ = run_engine(path)
    state = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=hf)["tensors"]
    missing, _ = hf.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()},
                                    strict=False)
    assert set(missing) <= {"lm_head.weight"}  # tied heads are not in the file
    assert not torch.equal(hf.model.layers[0].mlp.up_proj.weight, build(case)[0].model.layers[0]
                           .mlp.up_proj.weight)  # the peer now runs the Q8_0 values
    tokens, logits = reference(hf)
    assert out.token_ids == tokens
    first = out.token_ids[0]
    assert abs(out.logprobs[0][first] - float(logits[first])) < 1e-3


def test_other_architectures_are_refused_clearly(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "phi.gguf"
    writer = gguf.GGUFWriter(str(path), "phi2")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="'phi2' is not supported.*qwen3"):
        Engine(str(path))
