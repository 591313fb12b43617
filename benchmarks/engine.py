"""Engine benchmark: agentrt vs Hugging Face transformers (and llama.cpp when installed).

agentrt runs once per ``--quantization``: "auto" (a GGUF file's own block formats), "none"
(float32 weights), int8 / int4 (floats re-quantized for its kernels).

One run measures every engine on the same model (``--model``: default SmolLM2-135M-Instruct,
or any ``.gguf`` file / name agentrt finds), the same token ids and the same dtype, and prints
them side by side with the ratios agentrt / peer:

- prefill tok/s: ``prompt_len / TTFT``, where TTFT is the wall time of a generate call
  with one new token on a ``--prompt-len`` prompt (prefill + the first sampled token).
- decode tok/s, batch 1: ``(N - 1) / (T(N) - T(1))``: T(n) is the wall time of a generate
  call producing n tokens from a ``--decode-prompt-len`` prompt, N = ``--new-tokens``. The
  difference removes prefill and the first token, leaving N - 1 pure decode steps.
- decode tok/s, batch B: the same formula times B, for B different prompts of different
  lengths generated together (aggregate throughput; HF uses batched ``generate`` with left
  padding, agentrt continuous batching).

Every time is the median of ``--repeats`` calls after one warm-up call; the engines' calls
alternate, so a neighbour's load on a shared machine hits them alike. Greedy decoding, EOS
ignored on every side, so each call generates exactly the requested number of tokens. At
batch 1 the greedy tokens of agentrt and HF are compared.
agentrt runs its synchronous core (``LLMEngine``: add_request, step until done; no driver
thread) with the prefix cache disabled, so repeated prompts are computed in full; a step's
token budget covers the whole prompt, so the prefill prompt is one step. llama.cpp runs the
same GGUF file as agentrt's "auto" (HF and agentrt "none" its float32 conversion); their greedy
tokens are compared too.

Prompts are slices of a fixed text (module docstrings of the Python standard library),
tokenized once with the model's tokenizer; every engine receives the same ids.

    python benchmarks/engine.py                 # agentrt auto (Q4_1) / float32 / int4, peers
    python benchmarks/engine.py --model FILE.gguf --no-hf --quantization auto
    python benchmarks/make_gguf.py              # makes Q4_K_M / Q8_0 / Q4_1 files to run
    python benchmarks/engine.py --dtype bfloat16 --no-llamacpp --quantization none
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from _weights import step_weight_bytes

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_TEXT_MODULES = ("argparse", "json", "heapq", "doctest", "typing", "difflib", "collections")


# --- workload ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """The token ids every engine receives."""

    prefill: list[int]
    """The ``--prompt-len`` prompt of the prefill measurement."""
    decode: list[list[int]]
    """``--batch`` different prompts of different lengths; ``decode[0]`` is the batch-1 one."""


def corpus_text() -> str:
    """A few thousand tokens of fixed English prose: standard-library module docstrings."""
    return "\n\n".join(importlib.import_module(m).__doc__ or "" for m in _TEXT_MODULES)


def build_workload(tokenizer, prompt_len: int, decode_prompt_len: int, batch: int) -> Workload:
    ids = tokenizer.encode(corpus_text(), add_special_tokens=False)
    need = prompt_len + batch * decode_prompt_len
    ids = (ids * (need // len(ids) + 1))[:need]  # repeat the text only if it is too short
    decode, offset = [], prompt_len
    for i in range(batch):
        n = max(1, decode_prompt_len - 4 * i)  # lengths differ, so HF needs left padding
        decode.append(ids[offset : offset + n])
        offset += decode_prompt_len
    return Workload(prefill=ids[:prompt_len], decode=decode)


# --- engines: one call shape, so switching engines is one line -------------------------------
class Runner(Protocol):
    name: str
    can_batch: bool
    """Whether it is measured at batch B too (llama.cpp here: prefill and batch 1 only)."""

    def generate(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        """Greedy, EOS ignored: exactly ``new_tokens`` ids for every prompt."""
        ...

    def close(self) -> None: ...


class AgentrtRunner:
    can_batch = True

    def __init__(self, dtype: str, work: Workload, quantization: str = "none",
                 model: str | None = None, activations: str | None = None) -> None:
        from agentrt import EngineConfig, LLMEngine

        budget = max(2048, len(work.prefill), sum(map(len, work.decode)))
        extra = {} if activations is None else {"gguf_activations": activations}
        config = EngineConfig(
            model=model, dtype=dtype, max_num_seqs=max(8, len(work.decode)),
            max_num_batched_tokens=budget, enable_prefix_cache=False, quantization=quantization,
            profile_on_start=False, **extra)
        resolved = config.resolved_quantization
        self.name = "agentrt" if quantization == "none" else f"agentrt {quantization}"
        if resolved != quantization:
            self.name += f"={resolved}"
        if resolved == "gguf":
            self.name += f" {config.resolved_gguf_activations}"
        self.core = LLMEngine(config)
        self.step_bytes = step_weight_bytes(self.core.model)

    def generate(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        from agentrt import SamplingParams

        params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
        reqs = [self.core.add_request(p, params) for p in prompts]
        while self.core.has_unfinished():
            self.core.step()
        return [list(r.output_token_ids) for r in reqs]

    def close(self) -> None:
        self.core = None


class HFRunner:
    name = "HF transformers"
    can_batch = True

    def __init__(self, model_path: Path, dtype: str, pad_token_id: int) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=_DTYPES[dtype])
        self.model.eval()
        # NOTE: like agentrt's ignore_eos: generate never stops on EOS and masks no logits
        # (min_new_tokens would mask EOS and change the greedy tokens). A None eos_token_id in
        # a per-call GenerationConfig falls back to the model's, so clear the model's.
        self.model.generation_config.eos_token_id = None
        self.pad_token_id = pad_token_id

    def generate(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        from transformers import GenerationConfig

        config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens,
                                  pad_token_id=self.pad_token_id)
        ids, mask = left_pad(prompts, self.pad_token_id)
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        return out[:, ids.shape[1] :].tolist()

    def close(self) -> None:
        self.model = None


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) input ids padded on the left, and the matching attention mask."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(prompts), width), dtype=torch.int64)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    return ids, mask


class LlamaCppRunner:
    name = "llama.cpp"
    can_batch = False

    def __init__(self, gguf: Path, n_ctx: int, n_batch: int, threads: int) -> None:
        from _llamacpp import llama_options, open_llama

        self.note = "use_extra_bufts=False" if "use_extra_bufts" in llama_options() else ""
        self.llm = open_llama(gguf, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                              n_threads=threads, n_threads_batch=threads)

    def generate(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        from _llamacpp import greedy

        (prompt,) = prompts
        return [greedy(self.llm, prompt, new_tokens)]

    def close(self) -> None:
        self.llm.close()


# --- measurement ---------------------------------------------------------------------------
@dataclass
class Result:
    name: str
    step_bytes: int | None = None
    prefill_tps: float | None = None
    decode1_tps: float | None = None
    decode_batch_tps: float | None = None
    tokens_batch1: list[int] | None = None
    tokens_batch: list[list[int]] | None = None


@dataclass(frozen=True)
class Timing:
    seconds: float
    """Median wall time of one call."""
    output: list[list[int]]
    """Token ids of the last call."""


def interleaved_timings(runners: list[Runner], prompts: list[list[int]], new_tokens: int,
                        repeats: int) -> dict[str, Timing]:
    """Median time of ``generate(prompts, new_tokens)`` per runner, after one warm-up each.

    Repetitions alternate between the runners (reversing the order every round), so a
    neighbour's load on this shared machine slows every engine alike.
    """
    outputs = {r.name: r.generate(prompts, new_tokens) for r in runners}
    times: dict[str, list[float]] = {r.name: [] for r in runners}
    for i in range(repeats):
        for r in runners if i % 2 == 0 else runners[::-1]:
            t0 = time.perf_counter()
            outputs[r.name] = r.generate(prompts, new_tokens)
            times[r.name].append(time.perf_counter() - t0)
    return {n: Timing(statistics.median(t), outputs[n]) for n, t in times.items()}


def decode_rates(runners: list[Runner], prompts: list[list[int]], args: argparse.Namespace
                 ) -> dict[str, tuple[float, list[list[int]]]]:
    """Aggregate decode tok/s = B (N - 1) / (T(N) - T(1)) per runner, and its N-token outputs."""
    first = interleaved_timings(runners, prompts, 1, args.repeats)
    full = interleaved_timings(runners, prompts, args.new_tokens, args.repeats)
    scale = len(prompts) * (args.new_tokens - 1)
    rates = {}
    for n in full:
        dt = full[n].seconds - first[n].seconds  # <= 0 only when noise swamps tiny runs
        rates[n] = (scale / dt if dt > 0 else math.nan, full[n].output)
    return rates


def measure(runners: list[Runner], work: Workload, args: argparse.Namespace) -> list[Result]:
    results = {r.name: Result(r.name, getattr(r, "step_bytes", None)) for r in runners}
    for name, t in interleaved_timings(runners, [work.prefill], 1, args.repeats).items():
        results[name].prefill_tps = len(work.prefill) / t.seconds
    progress("prefill", results, "prefill_tps")
    for name, (rate, (out,)) in decode_rates(runners, work.decode[:1], args).items():
        results[name].decode1_tps, results[name].tokens_batch1 = rate, out
    progress("decode batch 1", results, "decode1_tps")
    batched = [r for r in runners if r.can_batch]
    for name, (rate, out) in decode_rates(batched, work.decode, args).items():
        results[name].decode_batch_tps, results[name].tokens_batch = rate, out
    progress(f"decode batch {args.batch}", results, "decode_batch_tps")
    return list(results.values())


def progress(label: str, results: dict[str, Result], attr: str) -> None:
    done = ", ".join(f"{n} {fmt(getattr(r, attr))}" for n, r in results.items()
                     if getattr(r, attr) is not None)
    print(f"  {label} tok/s: {done}", flush=True)


def read_bandwidth_gbs() -> float:
    """Best of 3: GB/s read by a torch sum over 1 GiB of float32."""
    x = torch.ones(2**28)
    x.sum()
    best = min(_timed(x.sum) for _ in range(3))
    return x.numel() * x.element_size() / best / 1e9


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def weight_bytes(model_path: Path, dtype: str) -> int:
    """Bytes of weights one decode step reads (each stored tensor once, in ``dtype``)."""
    from safetensors import safe_open

    n = 0
    with safe_open(str(model_path / "model.safetensors"), "pt") as f:
        for key in f.keys():
            n += int(torch.Size(f.get_slice(key).get_shape()).numel())
    return n * _DTYPES[dtype].itemsize


# --- report --------------------------------------------------------------------------------
def fmt(x: float | None) -> str:
    return "—" if x is None else "n/a" if math.isnan(x) else f"{x:,.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or math.isnan(a / b) else f"{a / b:.2f}×"


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    """One row per engine, then every agentrt row over every peer."""
    metrics = [(f"prefill tok/s ({args.prompt_len})", "prefill_tps"),
               ("decode tok/s, batch 1", "decode1_tps"),
               (f"decode tok/s, batch {args.batch}", "decode_batch_tps")]
    ours = [r for r in results if r.name.startswith("agentrt")]
    peers = [r for r in results if not r.name.startswith("agentrt")]
    lines = [["engine", *(label for label, _ in metrics)]]
    lines += [[r.name, *(fmt(getattr(r, a)) for _, a in metrics)] for r in results]
    lines += [[f"{o.name} / {p.name}", *(ratio(getattr(o, a), getattr(p, a)) for _, a in metrics)]
              for p in peers for o in ours]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for k, line in enumerate(lines):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                 enumerate(zip(line, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print_targets(ours, peers, args)


def print_targets(ours: list[Result], peers: list[Result], args: argparse.Namespace) -> None:
    """Issue 17's targets on the same file: batch-1 decode >= 1.3x llama.cpp's; batch-B
    aggregate >= 3x its batch 1."""
    llama = next((p for p in peers if p.name == LlamaCppRunner.name), None)
    if llama is None or llama.decode1_tps is None:
        return
    if math.isnan(llama.decode1_tps):
        print("targets: n/a (llama.cpp's batch-1 rate is n/a: noise swamped T(N) - T(1); "
              "raise --new-tokens)")
        return
    for o in ours:
        b1 = o.decode1_tps / llama.decode1_tps
        bb = o.decode_batch_tps / (3 * llama.decode1_tps)
        print(f"targets, {o.name}: batch-1 decode {b1:.2f}x llama.cpp's (target >= 1.3: "
              f"{'met' if b1 >= 1.3 else 'not met'}); batch-{args.batch} aggregate "
              f"{bb:.2f}x 3 x llama.cpp batch 1 (target >= 1: {'met' if bb >= 1 else 'not met'})")


def print_greedy_check(ours: Result, hf: Result | None) -> None:
    if hf is None:
        return
    same1 = ours.tokens_batch1 == hf.tokens_batch1
    print(f"greedy tokens identical (batch 1, {len(ours.tokens_batch1)} tokens): "
          f"{'yes' if same1 else 'no'}")
    same = [a == b for a, b in zip(ours.tokens_batch, hf.tokens_batch, strict=True)]
    print(f"greedy tokens identical (batch {len(same)}, per prompt; HF batched with left "
          f"padding, informative): {sum(same)}/{len(same)}")


def print_header(args: argparse.Namespace, model_path: Path) -> None:
    import transformers

    print(f"model: {model_path} (agentrt auto/gguf and llama.cpp run this file's blocks; HF "
          "and agentrt none its float32 conversion)" if model_path.is_file() else
          f"model folder (agentrt and HF load these same weights): {model_path}")
    given = "given" if args.dtype_given else "default"
    print(f"dtype: {args.dtype} on agentrt and HF ({given}); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; transformers {transformers.__version__}")
    print(f"prefill: {args.prompt_len}-token prompt, tok/s = prompt_len / time-to-first-token "
          f"(one generate call with 1 new token)")
    print(f"decode: {args.new_tokens} new tokens from ~{args.decode_prompt_len}-token prompts, "
          f"EOS ignored; tok/s = B*(N-1) / (T(N) - T(1)) with T = wall time of one generate "
          f"call; same method on every engine")
    print(f"timing: median of {args.repeats} calls after 1 warm-up, engines interleaved; "
          "agentrt: synchronous LLMEngine, prefix cache disabled (enable_prefix_cache=False)")
    print(f"load average before the run: {load_average()}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_floor(results: list[Result], model_path: Path, dtype: str) -> None:
    """The batch-1 ceiling each engine's weight bytes allow at this machine's read bandwidth."""
    bw = read_bandwidth_gbs()
    print(f"memory-bandwidth floor (batch-1 decode), {bw:.1f} GB/s read (torch sum over 1 GiB):")
    if model_path.is_file():
        print(f"  GGUF file: {model_path.stat().st_size / 1e6:,.0f} MB")
    else:
        print(f"  {dtype} checkpoint: {weight_bytes(model_path, dtype) / 1e6:,.0f} MB of weights")
    for r in results:
        if r.step_bytes:
            ceiling = bw * 1e9 / r.step_bytes  # a MoE's active parameters (_weights.py)
            reached = f", {r.decode1_tps / ceiling:.0%} of it" if r.decode1_tps else ""
            print(f"  {r.name}: {r.step_bytes / 1e6:,.0f} MB read per token -> at most "
                  f"{ceiling:.1f} tok/s (measured {fmt(r.decode1_tps)}{reached})")


# --- main ----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n    python")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dtype", choices=sorted(_DTYPES), default=None,
                   help="weights/activations dtype of agentrt and HF (default: float32)")
    p.add_argument("--prompt-len", type=int, default=512, help="prefill prompt tokens")
    p.add_argument("--decode-prompt-len", type=int, default=64,
                   help="tokens of the longest decode prompt (the others are 4, 8, ... shorter)")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per prompt (N)")
    p.add_argument("--batch", type=int, default=8, help="prompts decoded together (B)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per measurement")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch threads (agentrt and HF) and llama.cpp n_threads "
                        "(default: %(default)s, torch's default)")
    p.add_argument("--model", default=None,
                   help="a .gguf file or any name agentrt finds (default: the embedded "
                        "SmolLM2-135M-Instruct Q4_1 GGUF); llama.cpp runs the same file. "
                        "benchmarks/make_gguf.py makes Q4_K_M, Q8_0 and Q4_1 files of SmolLM2 "
                        "and of a 0.5B random-weight llama (benchmarks/README.md)")
    p.add_argument("--quantization", default="auto,none,int4",
                   help="agentrt runs, comma-separated EngineConfig.quantization values "
                        "(auto/gguf/int8/int4 need float32; default: %(default)s)")
    p.add_argument("--gguf-activations", default=None,
                   help="for runs on a GGUF's own blocks, comma-separated "
                        "EngineConfig.gguf_activations values (float32: exact weights; int8: "
                        "llama.cpp's integer path), one agentrt run each (default: the "
                        "engine's default only)")
    p.add_argument("--no-hf", action="store_true", help="skip HF transformers")
    p.add_argument("--no-llamacpp", action="store_true", help="skip llama.cpp")
    p.add_argument("--no-floor", action="store_true", help="skip the bandwidth-floor line")
    args = p.parse_args(argv)
    args.dtype_given = args.dtype is not None
    args.dtype = args.dtype or "float32"
    if args.new_tokens < 2 or args.repeats < 1 or args.batch < 1:
        p.error("need --new-tokens >= 2, --repeats >= 1, --batch >= 1")
    if args.decode_prompt_len <= 4 * (args.batch - 1):
        p.error("--decode-prompt-len must exceed 4 * (batch - 1)")
    return args


def make_runners(args: argparse.Namespace, model_path: Path, tokenizer, work: Workload
                 ) -> list[Runner]:
    """agentrt first, then the peers that are asked for and available."""
    from agentrt import EngineConfig

    runners: list[Runner] = []
    for q in args.quantization.split(","):
        blocks = EngineConfig(model=args.model, dtype=args.dtype,
                              quantization=q).resolved_quantization == "gguf"
        paths = args.gguf_activations.split(",") if blocks and args.gguf_activations else [None]
        runners += [AgentrtRunner(args.dtype, work, q, args.model, a) for a in paths]
    if args.no_hf:
        print("HF transformers: skipped (--no-hf)")
    else:
        from agentrt.models.files import resolve_model

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        runners.append(HFRunner(resolve_model(args.model), args.dtype, pad))
    llamacpp = make_llamacpp(args, work, model_path)
    if llamacpp is not None:
        runners.append(llamacpp)
    return runners


def make_llamacpp(args: argparse.Namespace, work: Workload,
                  model_path: Path) -> LlamaCppRunner | None:
    if args.no_llamacpp:
        print("llama.cpp: skipped (--no-llamacpp)")
        return None
    if importlib.util.find_spec("llama_cpp") is None:
        print("llama.cpp: skipped (llama-cpp-python is not installed; it is an optional peer: "
              "`pip install -e .[bench]` adds it)")
        return None
    if not model_path.is_file():
        print("llama.cpp: skipped (the model is a folder, not a GGUF file)")
        return None
    gguf = model_path
    n_ctx = max(len(work.prefill), args.decode_prompt_len) + args.new_tokens + 16
    n_batch = max(512, len(work.prefill))
    runner = LlamaCppRunner(gguf, n_ctx=n_ctx, n_batch=n_batch, threads=args.threads)
    print(f"llama.cpp: {gguf.name} (the same file as agentrt auto), "
          f"n_threads={args.threads}, n_batch={n_batch}, "
          f"{runner.note or 'use_extra_bufts not supported by this version'}; "
          "prefill and batch-1 decode only")
    return runner


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from agentrt.models.files import gguf_folder
    from agentrt.models.sources import locate

    model_path, _ = locate(args.model)
    folder = gguf_folder(model_path) if model_path.is_file() else model_path
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    work = build_workload(tokenizer, args.prompt_len, args.decode_prompt_len, args.batch)
    print_header(args, model_path)
    runners = make_runners(args, model_path, tokenizer, work)
    results = measure(runners, work, args)
    for r in runners:
        r.close()
    del runners
    gc.collect()

    print()
    print_table(results, args)
    print()
    hf = next((r for r in results if r.name == HFRunner.name), None)
    print_greedy_check(results[0], hf)
    llama = next((r for r in results if r.name == LlamaCppRunner.name), None)
    if llama is not None and llama.tokens_batch1 is not None:
        same = results[0].tokens_batch1 == llama.tokens_batch1
        print(f"greedy tokens identical to llama.cpp on the same file (batch 1, {results[0].name}"
              f"): {'yes' if same else 'no'}")
    if not args.no_floor:
        print_floor(results, model_path, args.dtype)
    print(f"load average at the end: {load_average()} (well above 0: other processes shared "
          "the CPU, absolute numbers are below an idle machine's; interleaving keeps the ratios "
          "fairer)")


if __name__ == "__main__":
    main()
