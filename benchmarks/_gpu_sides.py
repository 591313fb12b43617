"""One side of ``benchmarks/gpu.py`` and one workload, run in its own process.

    python benchmarks/_gpu_sides.py make-model SHAPE FOLDER
    python benchmarks/_gpu_sides.py run SIDE WORKLOAD FOLDER SPEC_JSON

``run`` starts on an empty GPU, measures, prints one ``RESULT {json}`` line and exits, leaving
nothing allocated for the next side. Only the standard library and torch are imported at load
and then the side's own library, so vLLM and SGLang run this file from their own virtual
environments (``--vllm-python`` / ``--sglang-python`` of gpu.py).

Workloads (the same calls and the same timing for every side; each timed ``repeats`` times):

- ``throughput``: prefill = ``prefill_batch`` prompts of ``prompt_len`` tokens generating one
  token each (every side's own generate call, wall time to the last output); decode at each
  batch in ``decode_batches`` = that many prompts of ``decode_prompt_len`` tokens generating
  ``decode_tokens`` tokens each, EOS ignored, prefix caches off;
- ``agent``: ``agents`` concurrent agents, each ``turns`` rounds of (generate ``gen_tokens``,
  a tool pause of a seeded random duration, ``obs_tokens`` of tool output appended), on a KV
  pool of ``agent_kv_tokens`` tokens, prefix caches on. agentrt pauses the request in place
  (its least-waste choice keeps, swaps over PCIe or drops the KV); vLLM and SGLang get the
  whole context again each turn and reuse what their prefix cache still holds.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(arch="LlamaForCausalLM", hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         vocab_size=49152, rope_theta=100000.0, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(arch="Qwen2ForCausalLM", hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         vocab_size=151936, rope_theta=1000000.0, tie_word_embeddings=True),
    "llama-3.2-3b": dict(arch="LlamaForCausalLM", hidden_size=3072, intermediate_size=8192,
                         num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
                         vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=True),
    "qwen2.5-7b": dict(arch="Qwen2ForCausalLM", hidden_size=3584, intermediate_size=18944,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       vocab_size=152064, rope_theta=1000000.0, tie_word_embeddings=False),
}
"""Real families' shapes (their config.json), filled with random bf16 weights."""


# --- the model --------------------------------------------------------------------------------
def make_model(shape: str, folder: Path) -> None:
    """A random-weight bf16 model of ``shape`` in ``folder`` (HF layout), with a word-level
    tokenizer over its whole vocabulary (every side is given token ids)."""
    import transformers
    from tokenizers import Tokenizer, models

    fields = dict(SHAPES[shape])
    arch = fields.pop("arch")
    cls = getattr(transformers, arch)
    config = cls.config_class(max_position_embeddings=8192, torch_dtype="bfloat16", **fields)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = cls(config).to(torch.bfloat16)
    for p in model.parameters():  # NOTE: small weights keep bf16 activations finite
        p.data.normal_(0.0, 0.02)
    model.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(config.vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="t1",
                                         pad_token="t0").save_pretrained(folder)


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, vocab) for _ in range(length)] for _ in range(n)]


def timed(call) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


# --- sides --------------------------------------------------------------------------------------
class Agentrt:
    def __init__(self, folder: Path, spec: dict, agent: bool) -> None:
        from agentrt import Engine

        kv = dict(num_blocks=spec["agent_kv_tokens"] // 16, block_size=16) if agent else \
            dict(kv_cache_gb=spec["kv_cache_gb"])
        self.engine = Engine(str(folder), device="cuda", dtype="bfloat16",
                             attention_backend=spec["attention_backend"],
                             enforce_eager=spec["enforce_eager"], max_num_seqs=spec["max_batch"],
                             enable_prefix_cache=agent, **kv)
        c = self.engine.config
        self.describe = (f"attention {c.resolved_attention_backend}, CUDA graphs "
                         f"{self.engine.cuda_graph_batch_sizes or 'off'}")

    def generate(self, ids: list[list[int]], max_tokens: int) -> None:
        from agentrt import SamplingParams

        self.engine.generate(ids, SamplingParams(max_tokens=max_tokens, ignore_eos=True))

    async def agent(self, rid: str, prompt: list[int], turns: list[tuple[float, list[int]]],
                    gen: int) -> None:
        from agentrt import Pause, SamplingParams

        params = SamplingParams(max_tokens=gen, ignore_eos=True)
        last = len(turns) == 0
        await self.engine.agenerate(prompt, params, request_id=rid, keep_kv=not last,
                                    **({} if last else {"pause": Pause("tool", None)}))
        for i, (pause, observation) in enumerate(turns):
            await asyncio.sleep(pause)
            last = i == len(turns) - 1
            await self.engine.aresume(rid, observation, params, keep_kv=not last,
                                      **({} if last else {"pause": Pause("tool", None)}))

    def close(self) -> None:
        self.engine.close()


class Transformers:
    def __init__(self, folder: Path, spec: dict, agent: bool, cudnn: bool = True) -> None:
        import transformers

        if agent:
            raise NotImplementedError("transformers has no concurrent serving loop")
        if not cudnn:  # NOTE: process-wide, so it holds on the generate loop's calls too
            torch.backends.cuda.enable_cudnn_sdp(False)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.bfloat16, attn_implementation="sdpa").to("cuda").eval()
        self.describe = f"transformers {transformers.__version__}, sdpa, cuDNN SDPA " \
                        f"{'on' if cudnn else 'off'}, static batch"

    @torch.inference_mode()
    def generate(self, ids: list[list[int]], max_tokens: int) -> None:
        x = torch.tensor(ids, device="cuda")  # equal lengths: no padding
        self.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                            max_new_tokens=max_tokens, min_new_tokens=max_tokens, pad_token_id=0)

    def close(self) -> None:
        del self.model


class VLLM:
    def __init__(self, folder: Path, spec: dict, agent: bool) -> None:
        import vllm

        common = dict(model=str(folder), dtype="bfloat16", seed=0,
                      enable_prefix_caching=agent, max_model_len=spec["max_model_len"])
        if agent:
            self.engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(
                num_gpu_blocks_override=spec["agent_kv_tokens"] // 16, block_size=16, **common))
        else:
            self.llm = vllm.LLM(gpu_memory_utilization=0.85, **common)
        self.describe = f"vllm {vllm.__version__}"

    def generate(self, ids: list[list[int]], max_tokens: int) -> None:
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0)
        self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params,
                          use_tqdm=False)

    async def agent(self, rid: str, prompt: list[int], turns: list[tuple[float, list[int]]],
                    gen: int) -> None:
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(max_tokens=gen, ignore_eos=True, temperature=0)
        context = list(prompt)
        for i in range(len(turns) + 1):
            final = None
            async for out in self.engine.generate(TokensPrompt(prompt_token_ids=context),
                                                  params, f"{rid}-{i}"):
                final = out
            context += list(final.outputs[0].token_ids)
            if i < len(turns):
                await asyncio.sleep(turns[i][0])
                context += turns[i][1]

    def close(self) -> None:
        if hasattr(self, "engine"):
            self.engine.shutdown()


class SGLang:
    def __init__(self, folder: Path, spec: dict, agent: bool) -> None:
        import sglang

        memory = dict(max_total_tokens=spec["agent_kv_tokens"]) if agent else \
            dict(mem_fraction_static=0.85)
        self.engine = sglang.Engine(model_path=str(folder), dtype="bfloat16",
                                    disable_radix_cache=not agent,
                                    context_length=spec["max_model_len"], **memory)
        self.describe = f"sglang {sglang.__version__}"

    def generate(self, ids: list[list[int]], max_tokens: int) -> None:
        self.engine.generate(input_ids=ids, sampling_params={
            "max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0})

    async def agent(self, rid: str, prompt: list[int], turns: list[tuple[float, list[int]]],
                    gen: int) -> None:
        params = {"max_new_tokens": gen, "ignore_eos": True, "temperature": 0}
        context = list(prompt)
        for i in range(len(turns) + 1):
            out = await self.engine.async_generate(input_ids=context, sampling_params=params)
            context += list(out["output_ids"])
            if i < len(turns):
                await asyncio.sleep(turns[i][0])
                context += turns[i][1]

    def close(self) -> None:
        self.engine.shutdown()


SIDES = {"agentrt": Agentrt, "transformers": Transformers,
         "transformers-no-cudnn": lambda f, s, a: Transformers(f, s, a, cudnn=False),
         "vllm": VLLM, "sglang": SGLang}
"""Side name → constructor(model folder, spec, is the agent workload)."""


# --- workloads ----------------------------------------------------------------------------------
def throughput(side: Any, spec: dict, vocab: int) -> dict:
    """Median seconds of prefill and of decode at each batch (see the module docstring)."""
    r = spec["repeats"]
    batch = prompts(spec["prefill_batch"], spec["prompt_len"], vocab, seed=1)
    side.generate(batch[:2], 1)  # warm-up
    out = {"prefill_s": statistics.median(timed(lambda: side.generate(batch, 1))
                                          for _ in range(r))}
    for b in spec["decode_batches"]:
        ids = prompts(b, spec["decode_prompt_len"], vocab, seed=b)
        side.generate(ids, 4)  # warm-up at this batch size
        out[f"decode_s_{b}"] = statistics.median(
            timed(lambda ids=ids: side.generate(ids, spec["decode_tokens"])) for _ in range(r))
    return out


def agent_plan(spec: dict, vocab: int, seed: int) -> list[tuple[list[int], list]]:
    """Each agent's prompt and its turns: (tool pause seconds, observation ids)."""
    rng = random.Random(seed)
    plan = []
    for a in prompts(spec["agents"], spec["agent_prompt_len"], vocab, seed):
        turns = [(rng.choice(spec["tool_seconds"]), prompts(1, spec["obs_tokens"], vocab,
                                                             rng.randrange(1 << 30))[0])
                 for _ in range(spec["turns"] - 1)]
        plan.append((a, turns))
    return plan


def agent(side: Any, spec: dict, vocab: int) -> dict:
    """Median makespan of the agent workload (see the module docstring)."""
    async def once(tag: str, plan) -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(side.agent(f"{tag}-{i}", p, turns, spec["gen_tokens"])
                               for i, (p, turns) in enumerate(plan)))
        return time.perf_counter() - t0

    async def run_all() -> list[float]:
        await once("warm", agent_plan({**spec, "agents": 2}, vocab, seed=99))
        return [await once(f"r{k}", agent_plan(spec, vocab, seed=k))
                for k in range(spec["repeats"])]

    times = asyncio.run(run_all())
    return {"agent_s": statistics.median(times), "agent_runs_s": times}


def main(argv: list[str]) -> None:
    if argv[:1] == ["make-model"]:
        make_model(argv[1], Path(argv[2]))
        return
    _, name, workload, folder, spec_json = argv
    spec = json.loads(spec_json)
    vocab = json.loads((Path(folder) / "config.json").read_text())["vocab_size"]
    t0 = time.perf_counter()
    side = SIDES[name](Path(folder), spec, workload == "agent")
    result = {"describe": side.describe, "start_s": time.perf_counter() - t0,
              "gpu": torch.cuda.get_device_name()}
    result.update((agent if workload == "agent" else throughput)(side, spec, vocab))
    side.close()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
