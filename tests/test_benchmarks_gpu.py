"""benchmarks/gpu.py off the GPU: its help, its exit without a GPU, and the parts of its side
processes that need none (the random-weight model, the workloads' timing over a fake side)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _gpu_sides as sides  # noqa: E402
import gpu  # noqa: E402


def test_help_explains_every_side_and_quick():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "gpu.py"), "--help"],
                         capture_output=True, text=True, check=True).stdout
    for word in (*gpu.SIDES, "--quick", "own process", "median", "Exit status"):
        assert word in out
    assert set(gpu.SHAPES) == set(sides.SHAPES)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run without a GPU")
def test_without_a_gpu_it_says_so_and_exits_2():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "gpu.py"), "--quick"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "needs a CUDA GPU" in out.stdout


def test_quick_fills_only_what_was_not_given():
    args = gpu.parse_args(["--quick", "--repeats", "5"])
    assert args.repeats == 5 and args.prefill_batch == gpu.QUICK["prefill_batch"]


class FakeSide:
    """Records what a side is asked to do."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.agents: list[tuple[str, int, int]] = []

    def generate(self, ids: list[list[int]], max_tokens: int) -> None:
        self.calls.append((len(ids), len(ids[0]), max_tokens))

    async def agent(self, rid, prompt, turns, gen) -> None:
        self.agents.append((rid, len(prompt), len(turns)))


def test_every_side_gets_the_same_calls_and_medians():
    spec = gpu.spec(gpu.parse_args(["--quick", "--repeats", "3", "--decode-batches", "1,4",
                                    "--agents", "3", "--tool-seconds", "0"]))
    side = FakeSide()
    out = sides.throughput(side, spec, vocab=1000)
    assert set(out) == {"prefill_s", "decode_s_1", "decode_s_4"}
    prefill = (spec["prefill_batch"], spec["prompt_len"], 1)
    assert side.calls.count(prefill) == 3  # timed 3 times (plus a 2-prompt warm-up)
    assert side.calls.count((4, spec["decode_prompt_len"], spec["decode_tokens"])) == 3
    out = sides.agent(side, spec, vocab=1000)
    assert len(out["agent_runs_s"]) == 3 and out["agent_s"] == sorted(out["agent_runs_s"])[1]
    timed = [a for a in side.agents if a[0].startswith("r")]
    assert len(timed) == 9 and {a[1:] for a in timed} == {(spec["agent_prompt_len"], 2)}
    assert sides.agent_plan(spec, 1000, 0) == sides.agent_plan(spec, 1000, 0)


def test_the_model_is_written_in_its_shape(tmp_path, monkeypatch):
    import transformers

    tiny = dict(sides.SHAPES["qwen2.5-1.5b"], hidden_size=64, intermediate_size=128,
                num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=300)
    monkeypatch.setitem(sides.SHAPES, "tiny", tiny)
    sides.make_model("tiny", tmp_path)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert config.model_type == "qwen2" and config.num_key_value_heads == 2
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert tok.convert_tokens_to_ids("t299") == 299 and tok.convert_tokens_to_ids("t7") == 7
