"""GPU benchmark: agentrt vs transformers (default SDPA, and without cuDNN's), vLLM and SGLang on
one random-weight bf16 model in the shape of a real family; each side in its own process.

Fairness: every side and workload runs in a fresh process on an empty GPU (nothing of the
previous side stays allocated), gets the same token ids, is warmed up, and is timed the same
way, ``--repeats`` times, the median reported. The model is written once: random weights in
the shape of a real family (``--shape``, e.g. Qwen2.5-1.5B or Llama-3.2-3B), in bfloat16, with
a word-level tokenizer over its whole vocabulary.

Sides (--sides): agentrt (FlashInfer attention when it can run, CUDA-graph decode),
transformers (its default SDPA: torch picks cuDNN's where it can), transformers-no-cudnn (the
same with cuDNN's SDPA off), vllm, sglang.

Workloads (details in benchmarks/_gpu_sides.py):

  prefill   --prefill-batch prompts of --prompt-len tokens, one output token each: every
            side's own generate call (transformers: ``generate(max_new_tokens=1)``)
  decode    at each of --decode-batches: that many prompts of --decode-prompt-len tokens,
            --decode-tokens tokens each, EOS ignored
  agent     --agents concurrent agents, --turns rounds each of (generate --gen-tokens, a tool
            pause drawn from --tool-seconds, --obs-tokens of tool output appended), on a KV
            pool of --agent-kv-tokens tokens: agentrt pauses in place (least-waste: keep, swap
            over PCIe, or drop); vLLM and SGLang resend the context and reuse their prefix
            cache. transformers has no serving loop and is left out.

vLLM and SGLang run from their own virtual environments (their PyPI wheels pin their own
torch): give their interpreters with --vllm-python / --sglang-python; without them a side runs
under this interpreter if it imports here, and is skipped (said so) otherwise.

Exit status: 0 after a run; 2 without a CUDA GPU (a message says so; nothing runs).

    python benchmarks/gpu.py --quick                 # a few minutes: 1.5B shape, 1 repeat
    python benchmarks/gpu.py --shape llama-3.2-3b --repeats 5
    python benchmarks/gpu.py --sides agentrt,vllm --vllm-python ~/venvs/vllm/bin/python
    python benchmarks/gpu.py --shape smollm2-135m --sides agentrt --workloads throughput
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
SIDES_SCRIPT = BENCHMARKS / "_gpu_sides.py"
SIDES = ("agentrt", "transformers", "transformers-no-cudnn", "vllm", "sglang")
SHAPES = ("qwen2.5-1.5b", "llama-3.2-3b", "qwen2.5-7b", "smollm2-135m")
"""The shapes _gpu_sides.py writes (kept here so --help never imports torch)."""
MODULES = {"agentrt": "agentrt", "transformers": "transformers",
           "transformers-no-cudnn": "transformers", "vllm": "vllm", "sglang": "sglang"}
QUICK = dict(repeats=1, prefill_batch=8, prompt_len=512, decode_batches="1,32",
             decode_tokens=64, agents=32, turns=3, gen_tokens=32)
"""What --quick sets (one short run that fits a lent GPU's few minutes)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    head, _, rest = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(description=head, epilog=rest,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=SHAPES,
                   help="the family shape of the random-weight model (qwen2.5-1.5b)")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="where to write (or find) the model; default: a temporary folder")
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma list of {', '.join(SIDES)}")
    p.add_argument("--workloads", default="throughput,agent", help="throughput,agent")
    p.add_argument("--vllm-python", default=None, help="the interpreter of vLLM's venv")
    p.add_argument("--sglang-python", default=None, help="the interpreter of SGLang's venv")
    p.add_argument("--quick", action="store_true",
                   help="one short run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--repeats", type=int, default=3, help="timed runs per measure (3)")
    p.add_argument("--prefill-batch", type=int, default=16, help="prefill prompts (16)")
    p.add_argument("--prompt-len", type=int, default=1024, help="prefill prompt tokens (1024)")
    p.add_argument("--decode-batches", default="1,8,32", help="decode batch sizes (1,8,32)")
    p.add_argument("--decode-tokens", type=int, default=128, help="tokens per request (128)")
    p.add_argument("--decode-prompt-len", type=int, default=128, help="decode prompts (128)")
    p.add_argument("--agents", type=int, default=64, help="concurrent agents (64)")
    p.add_argument("--turns", type=int, default=4, help="generations per agent (4)")
    p.add_argument("--agent-prompt-len", type=int, default=1024, help="agent prompts (1024)")
    p.add_argument("--gen-tokens", type=int, default=64, help="tokens per turn (64)")
    p.add_argument("--obs-tokens", type=int, default=128, help="tool output tokens (128)")
    p.add_argument("--tool-seconds", default="0.1,0.5,2.0",
                   help="tool pauses to draw from, seconds (0.1,0.5,2.0)")
    p.add_argument("--agent-kv-tokens", type=int, default=65536,
                   help="KV pool of every side in the agent workload, tokens (65536): less "
                        "than the agents' contexts, so KV handling matters")
    p.add_argument("--attention-backend", default="auto", help="agentrt's (auto)")
    p.add_argument("--enforce-eager", action="store_true", help="agentrt without CUDA graphs")
    p.add_argument("--kv-cache-gb", type=float, default=16.0, help="agentrt's pool, throughput")
    p.add_argument("--max-batch", type=int, default=64, help="agentrt max_num_seqs (64)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per side process")
    defaults = {k: p.get_default(k) for k in QUICK}
    p.set_defaults(**dict.fromkeys(QUICK))  # NOTE: None = not given: it wins over --quick
    args = p.parse_args(argv)
    for k in QUICK:
        if getattr(args, k) is None:
            setattr(args, k, QUICK[k] if args.quick else defaults[k])
    _check_names(p, args.sides, SIDES, "--sides")
    _check_names(p, args.workloads, ("throughput", "agent"), "--workloads")
    return args


def _check_names(p: argparse.ArgumentParser, text: str, allowed, flag: str) -> None:
    unknown = [n for n in text.split(",") if n not in allowed]
    if unknown:
        p.error(f"{flag}: unknown {unknown}; choose from {', '.join(allowed)}")


def spec(args: argparse.Namespace) -> dict:
    """What every side process is given (the same for all)."""
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    return dict(repeats=args.repeats, prefill_batch=args.prefill_batch,
                prompt_len=args.prompt_len, decode_batches=ints(args.decode_batches),
                decode_tokens=args.decode_tokens, decode_prompt_len=args.decode_prompt_len,
                agents=args.agents, turns=args.turns, agent_prompt_len=args.agent_prompt_len,
                gen_tokens=args.gen_tokens, obs_tokens=args.obs_tokens,
                tool_seconds=[float(x) for x in args.tool_seconds.split(",")],
                agent_kv_tokens=args.agent_kv_tokens, max_model_len=8192,
                attention_backend=args.attention_backend, enforce_eager=args.enforce_eager,
                kv_cache_gb=args.kv_cache_gb, max_batch=args.max_batch)


def gpu_name() -> str | None:
    """The first CUDA GPU's name, asked in a child process (this one never touches CUDA)."""
    code = "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or None


def interpreter(side: str, args: argparse.Namespace) -> str | None:
    """The Python that runs ``side``, or None (printed why) when none can."""
    given = {"vllm": args.vllm_python, "sglang": args.sglang_python}.get(side)
    if given:
        return given
    code = f"import importlib.util as u, sys; sys.exit(u.find_spec({MODULES[side]!r}) is None)"
    if subprocess.run([sys.executable, "-c", code]).returncode:
        print(f"{side}: skipped ({MODULES[side]} is not installed here; pass --{side}-python)")
        return None
    return sys.executable


def run_side(python: str, side: str, workload: str, folder: Path, args) -> dict | None:
    """One side process; its RESULT line, or None (printed why)."""
    cmd = [python, str(SIDES_SCRIPT), "run", side, workload, str(folder), json.dumps(spec(args))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(BENCHMARKS.parent), str(BENCHMARKS.parent / "kernels"),
         os.environ.get("PYTHONPATH", "")])} if side == "agentrt" else None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"{side} {workload}: over --timeout {args.timeout} s")
        return None
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        tail = "\n    ".join((out.stderr or out.stdout).strip().splitlines()[-8:])
        print(f"{side} {workload}: failed (exit {out.returncode}):\n    {tail}")
        return None
    result = json.loads(lines[-1][len("RESULT "):])
    print(f"{side} {workload}: {result['describe']} (started in {result['start_s']:.0f} s)",
          flush=True)
    return result


def rates(r: dict, args: argparse.Namespace) -> dict[str, float]:
    """The measures as rates (higher is better)."""
    s = spec(args)
    out = {}
    if "prefill_s" in r:
        out[f"prefill tok/s ({s['prefill_batch']}x{s['prompt_len']})"] = \
            s["prefill_batch"] * s["prompt_len"] / r["prefill_s"]
        for b in s["decode_batches"]:
            out[f"decode tok/s, batch {b}"] = b * s["decode_tokens"] / r[f"decode_s_{b}"]
    if "agent_s" in r:
        out[f"agent turns/s ({s['agents']} agents x {s['turns']})"] = \
            s["agents"] * s["turns"] / r["agent_s"]
    return out


def print_table(by_side: dict[str, dict[str, float]]) -> None:
    names = list(by_side)
    peers = [n for n in names if n != "agentrt"]
    metrics = list(dict.fromkeys(m for r in by_side.values() for m in r))
    rows = [["metric (median)", *names, *(f"agentrt/{n}" for n in peers if "agentrt" in names)]]
    for m in metrics:
        values = [by_side[n].get(m) for n in names]
        row = [m, *(f"{v:,.1f}" if v else "-" for v in values)]
        if "agentrt" in names:
            ours = by_side["agentrt"].get(m)
            row += [f"{ours / by_side[n][m]:.2f}x" if ours and by_side[n].get(m) else "-"
                    for n in peers]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    gpu = gpu_name()
    if gpu is None:
        print("benchmarks/gpu.py needs a CUDA GPU and torch sees none here: nothing was run. "
              "On CPU, benchmarks/engine.py and benchmarks/interception.py measure agentrt.")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model_dir or Path(tmp) / args.shape
        if not (folder / "config.json").exists():
            print(f"writing a random-weight {args.shape} (bf16) to {folder}", flush=True)
            subprocess.run([sys.executable, str(SIDES_SCRIPT), "make-model", args.shape,
                            str(folder)], check=True)
        print(f"# {args.shape} (random bf16 weights) on {gpu}; each side in its own process; "
              f"median of {args.repeats}")
        by_side: dict[str, dict[str, float]] = {}
        for side in args.sides.split(","):
            python = interpreter(side, args)
            for workload in args.workloads.split(","):
                if python is None or workload == "agent" and side.startswith("transformers"):
                    continue
                result = run_side(python, side, workload, folder, args)
                if result is not None:
                    by_side.setdefault(side, {}).update(rates(result, args))
    print("\n# Rates (higher is better; agentrt/peer > 1 = agentrt faster)")
    if by_side:
        print_table(by_side)
    print("command: " + shlex.join(sys.orig_argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
