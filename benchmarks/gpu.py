"""GPU benchmark: agentrt's engine on CUDA vs Hugging Face transformers (and vLLM / SGLang
where they are installed), same model, same GPU, bfloat16, greedy; one run, both sides
printed with their ratios.

What it measures, per side:

  prefill   tok/s of --prefill-batch prompts of --prompt-len random tokens, one output token
            each (agentrt: ``Engine.generate(ids, SamplingParams(max_tokens=1))``; HF: one
            ``model(input_ids)`` forward; vLLM: ``LLM.generate``; SGLang: ``Engine.generate``)
  decode    output tok/s at batch 1, 8 and 32 (--decode-batches): that many requests with a
            --decode-prompt-len-token prompt, --decode-tokens tokens each, EOS ignored
            (HF: ``model.generate(min_new_tokens=max_new_tokens)``, static batch)
  agent     the agent workload of ``benchmarks/agent_langchain.py`` (its tasks, tools and
            report), with (a) HF transformers on the GPU in bfloat16 and (c)/(d) agentrt on
            the GPU; llama.cpp is left out (a CPU peer)

agentrt runs with CUDA graphs for decode and FlashInfer attention when it is installed
(``--enforce-eager`` and ``--attention-backend torch`` turn them off). Every side is warmed
up once before it is timed; times are wall clock after ``torch.cuda.synchronize()``.

It needs a CUDA GPU and exits with a message without one. Its first GPU run (H200, without the
agent workload, vLLM or SGLang) is in docs/performance.md (GPU).

    python benchmarks/gpu.py                           # everything
    python benchmarks/gpu.py --skip-agent --decode-batches 1,8
    python benchmarks/gpu.py --model Qwen/Qwen2.5-0.5B-Instruct --skip-vllm --skip-sglang
    python benchmarks/gpu.py --skip-agent --attention-backend torch --sdpa-backends math
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import importlib.util
import random
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

BENCHMARKS = Path(__file__).resolve().parent


@dataclass
class Result:
    """One side's measurements; None = not run."""

    prefill_tok_s: float | None = None
    decode_tok_s: dict[int, float] | None = None


# --- workloads ------------------------------------------------------------------------------
def random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab - 100) for _ in range(length)] for _ in range(n)]


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn`` takes, the GPU's queued work included."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


# --- sides ----------------------------------------------------------------------------------
class AgentrtSide:
    name = "agentrt"

    def __init__(self, model: str | None, args: argparse.Namespace) -> None:
        from agentrt import Engine

        self.engine = Engine(model, device=args.device, dtype=args.dtype,
                             attention_backend=args.attention_backend,
                             enforce_eager=args.enforce_eager, max_num_seqs=args.max_batch,
                             max_num_batched_tokens=args.max_batched_tokens,
                             kv_cache_gb=args.kv_cache_gb)
        c, graphs = self.engine.config, self.engine.cuda_graph_batch_sizes
        self.describe = (f"{c.resolved_device}, {c.resolved_dtype}, attention "
                         f"{c.resolved_attention_backend}, decode CUDA graphs for batch sizes "
                         f"{graphs or 'none (eager)'}")

    def generate(self, prompts: list[list[int]], max_tokens: int) -> int:
        from agentrt import SamplingParams

        self.engine.clear_prefix_cache()  # NOTE: nothing reused between timed runs
        outs = self.engine.generate(prompts, SamplingParams(max_tokens=max_tokens,
                                                            ignore_eos=True))
        return sum(len(o.token_ids) for o in outs)

    def close(self) -> None:
        self.engine.close()


class HFSide:
    name = "HF transformers"

    def __init__(self, model_path: Path, args: argparse.Namespace) -> None:
        import transformers

        transformers.logging.set_verbosity_error()
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_path), dtype=getattr(torch, args.hf_dtype)).to(args.device).eval()
        self.device = args.device
        self.describe = f"{args.device}, {args.hf_dtype}, sdpa, static batch"

    @torch.inference_mode()
    def prefill(self, prompts: list[list[int]]) -> int:
        ids = torch.tensor(prompts, device=self.device)  # equal lengths: no padding
        self.model(ids, use_cache=True, logits_to_keep=1)
        return ids.numel()

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_tokens: int) -> int:
        ids = torch.tensor(prompts, device=self.device)
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                  pad_token_id=0)
        return (out.shape[1] - ids.shape[1]) * ids.shape[0]

    def close(self) -> None:
        del self.model


class VLLMSide:
    name = "vLLM"

    def __init__(self, model_path: Path, args: argparse.Namespace) -> None:
        from vllm import LLM

        self.llm = LLM(model=str(model_path), dtype=args.hf_dtype, gpu_memory_utilization=0.5,
                       enable_prefix_caching=False, seed=0)
        self.describe = f"vllm {importlib.metadata.version('vllm')}, {args.hf_dtype}"

    def generate(self, prompts: list[list[int]], max_tokens: int) -> int:
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                                 use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    def close(self) -> None:
        del self.llm


class SGLangSide:
    name = "SGLang"

    def __init__(self, model_path: Path, args: argparse.Namespace) -> None:
        import sglang

        self.engine = sglang.Engine(model_path=str(model_path), dtype=args.hf_dtype,
                                    mem_fraction_static=0.5, disable_radix_cache=True)
        self.describe = f"sglang {importlib.metadata.version('sglang')}, {args.hf_dtype}"

    def generate(self, prompts: list[list[int]], max_tokens: int) -> int:
        params = {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
        outs = self.engine.generate(input_ids=prompts, sampling_params=params)
        return sum(o["meta_info"]["completion_tokens"] for o in outs)

    def close(self) -> None:
        self.engine.shutdown()


def measure(side: Any, args: argparse.Namespace, vocab: int) -> Result:
    """Prefill and decode throughput of one side (each warmed up once)."""
    res = Result(decode_tok_s={})
    prompts = random_prompts(args.prefill_batch, args.prompt_len, vocab, seed=1)
    prefill = getattr(side, "prefill", None) or (lambda p: side.generate(p, 1))
    prefill(prompts[:1])  # warm-up
    res.prefill_tok_s = len(prompts) * args.prompt_len / timed(lambda: prefill(prompts))
    for batch in args.decode_batches:
        prompts = random_prompts(batch, args.decode_prompt_len, vocab, seed=batch)
        side.generate(prompts, 4)  # warm-up at this batch size
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        num_tokens = side.generate(prompts, args.decode_tokens)
        torch.cuda.synchronize()
        res.decode_tok_s[batch] = num_tokens / (time.perf_counter() - t0)
    return res


# --- report ---------------------------------------------------------------------------------
def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))))


def print_results(ours: Result, peers: dict[str, Result], args: argparse.Namespace) -> None:
    names = list(peers)
    rows = [["metric", "agentrt"] + names + [f"agentrt / {n}" for n in names]]

    def line(label: str, get: Callable[[Result], float | None]) -> None:
        mine = get(ours)
        values = [get(peers[n]) for n in names]
        rows.append([label, f"{mine:,.0f}"] + [f"{v:,.0f}" if v else "—" for v in values]
                    + [f"{mine / v:.2f}×" if v else "—" for v in values])

    line(f"prefill tok/s ({args.prefill_batch}×{args.prompt_len})", lambda r: r.prefill_tok_s)
    for b in args.decode_batches:
        line(f"decode tok/s, batch {b}", lambda r, b=b: (r.decode_tok_s or {}).get(b))
    print_table(rows)


def run_agent_workload(model_path: Path, args: argparse.Namespace) -> None:
    """benchmarks/agent_langchain.py's tasks and report, with its peers on the GPU."""
    sys.path.insert(0, str(BENCHMARKS))
    import agent_langchain as al

    class GpuHFBackend(al.HFBackend):
        label = f"AgentExecutor + ChatHuggingFace (HF transformers, {args.device}, bf16)"

        def __init__(self, path: Path, max_new_tokens: int) -> None:
            import transformers
            from langchain_huggingface import ChatHuggingFace

            tok = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(path), dtype=getattr(torch, args.hf_dtype), local_files_only=True)
            model = model.to(args.device).eval()
            self.meter = al.GenerateMeter(model)
            pipe = transformers.pipeline("text-generation", model=model, tokenizer=tok,
                                         max_new_tokens=max_new_tokens, do_sample=False,
                                         return_full_text=False)
            llm = al._make_stop_pipeline_class()(pipeline=pipe, meter=self.meter)
            self.llm = ChatHuggingFace(llm=llm, tokenizer=tok)

    agent_args = al.parse_args(["--tasks", str(args.agent_tasks), "--skip-llamacpp"])
    from agentrt import Engine

    engine = Engine(args.model, device=args.device, dtype=args.dtype,
                    attention_backend=args.attention_backend, enforce_eager=args.enforce_eager)
    backends = []
    if args.skip_hf:
        print("(a) skipped: --skip-hf")
    else:
        try:
            backends.append(GpuHFBackend(model_path, agent_args.max_new_tokens))
        except ImportError as exc:
            print(f"(a) skipped: {exc} (pip install langchain-huggingface)")
    backends += [al.AgentrtBackend(engine, agent_args.max_new_tokens, session=s)
                 for s in (True, False)]
    import tempfile

    with tempfile.TemporaryDirectory() as folder, al.make_runtime(Path(folder)) as runtime:
        al.warm_up_tools(runtime)
        for b in backends:
            b.warm_up()
        results = [al.run_kind(kind, backends, agent_args.task_list, runtime, agent_args)
                   for kind in agent_args.agents]
    print("\n# Agent workload (latency = wall time of executor.invoke; llama.cpp, a CPU "
          "peer, left out)")
    sums = [al.print_kind(res, backends) for res in results]
    for key in ("a", "d"):
        pairs = [s for s in sums if key in s and "c" in s]
        if pairs:
            total = sum(s[key] for s in pairs) / sum(s["c"] for s in pairs)
            print(f"total latency ({key}) / (c): {total:.2f}×")
    engine.close()


# --- main -----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n    python")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None,
                   help="agentrt --model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="cuda", help="cuda or cuda:N (default cuda)")
    p.add_argument("--dtype", default="auto", help="agentrt dtype (default auto = bf16)")
    p.add_argument("--hf-dtype", default="bfloat16", help="the peers' dtype (bfloat16)")
    p.add_argument("--attention-backend", default="auto", help="agentrt attention (auto)")
    p.add_argument("--enforce-eager", action="store_true", help="agentrt without CUDA graphs")
    p.add_argument("--prompt-len", type=int, default=512, help="prefill prompt tokens (512)")
    p.add_argument("--prefill-batch", type=int, default=16, help="prefill prompts (16)")
    p.add_argument("--decode-batches", default="1,8,32",
                   type=lambda s: [int(x) for x in s.split(",")],
                   help="decode batch sizes (1,8,32)")
    p.add_argument("--decode-tokens", type=int, default=128, help="tokens per request (128)")
    p.add_argument("--decode-prompt-len", type=int, default=32, help="decode prompts (32)")
    p.add_argument("--max-batch", type=int, default=64, help="agentrt max_num_seqs (64)")
    p.add_argument("--max-batched-tokens", type=int, default=8192,
                   help="agentrt max_num_batched_tokens (8192)")
    p.add_argument("--kv-cache-gb", type=float, default=8.0, help="agentrt KV pool (8 GB)")
    p.add_argument("--agent-tasks", type=int, default=4, help="agent tasks per agent (4)")
    p.add_argument("--sdpa-backends", type=_sdpa_backends, default=None, metavar="LIST",
                   help="the SDPA backends every side may use (torch picks among them in "
                        f"its own order): a comma list of {', '.join(SDPA_BACKENDS)} "
                        "(default: all). transformers' sdpa goes through SDPA (and agentrt's "
                        "torch attention backend, which leaves cuDNN out on CUDA); FlashInfer "
                        "does not. 'flash,efficient,math' is transformers without cuDNN, which "
                        "plans every new decode length anew (docs/gpu.md)")
    for peer in ("hf", "vllm", "sglang", "agent"):
        p.add_argument(f"--skip-{peer}", action="store_true", help=f"skip {peer}")
    return p.parse_args(argv)


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "math": "MATH", "cudnn": "CUDNN_ATTENTION"}
"""--sdpa-backends names → ``torch.nn.attention.SDPBackend`` members."""


def _sdpa_backends(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SDPA_BACKENDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown SDPA backend(s) {unknown or [text]}; choose "
                                         f"from {', '.join(SDPA_BACKENDS)}")
    return names


def sdpa_choice(names: list[str] | None) -> contextlib.AbstractContextManager:
    """SDPA limited to ``names`` for the whole run (process-wide flags: the engine's own
    thread too), or torch's own choice."""
    if not names:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, SDPA_BACKENDS[n]) for n in names])


def require_cuda(device: str) -> None:
    if not torch.cuda.is_available():
        sys.exit(f"benchmarks/gpu.py needs a CUDA GPU: torch {torch.__version__} (CUDA build: "
                 f"{torch.version.cuda}) sees none. On CPU use benchmarks/engine.py.")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        sys.exit(f"benchmarks/gpu.py: {device} asked for, {torch.cuda.device_count()} GPU(s)")


def peer_sides(model_path: Path, args: argparse.Namespace) -> list[tuple[str, Callable]]:
    """(name, constructor) of each peer to run; prints why the others are left out."""
    sides = []
    for flag, module, cls in (("hf", "transformers", HFSide), ("vllm", "vllm", VLLMSide),
                              ("sglang", "sglang", SGLangSide)):
        if getattr(args, f"skip_{flag}"):
            print(f"{cls.name}: skipped (--skip-{flag})")
        elif importlib.util.find_spec(module) is None:
            print(f"{cls.name}: skipped (not installed)")
        else:
            sides.append((cls.name, lambda cls=cls: cls(model_path, args)))
    return sides


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    require_cuda(args.device)
    from agentrt.models.files import resolve_model

    model_path = resolve_model(args.model)
    print(f"# agentrt on {torch.cuda.get_device_name(args.device)} vs peers; model "
          f"{model_path}; torch {torch.__version__}, CUDA {torch.version.cuda}; SDPA "
          f"backends: {','.join(args.sdpa_backends or ['torch default'])}")
    with sdpa_choice(args.sdpa_backends):
        run(args, model_path)
    print("command: " + shlex.join(sys.orig_argv))


def run(args: argparse.Namespace, model_path: Path) -> None:
    """Every side measured and printed (see the module docstring)."""
    ours = AgentrtSide(args.model, args)
    vocab = ours.engine.model_info.vocab_size
    print(f"agentrt: {ours.describe}", flush=True)
    mine = measure(ours, args, vocab)
    ours.close()
    peers: dict[str, Result] = {}
    for name, make in peer_sides(model_path, args):
        gc.collect()
        torch.cuda.empty_cache()
        try:
            side = make()
        except Exception as exc:  # noqa: BLE001 - a peer that cannot start is reported
            print(f"{name}: could not start ({type(exc).__name__}: {exc})")
            continue
        print(f"{name}: {side.describe}", flush=True)
        peers[name] = measure(side, args, vocab)
        side.close()
    print("\n# Throughput (higher is better; ratio > 1 = agentrt faster)")
    print_results(mine, peers, args)
    if not args.skip_agent:
        run_agent_workload(model_path, args)


if __name__ == "__main__":
    main()
