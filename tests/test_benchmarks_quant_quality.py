"""benchmarks/quant_quality.py: its agreement measures on made-up runs, and one short real run
on the default model (llama.cpp skipped: the suite does not install it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def qq():
    spec = importlib.util.spec_from_file_location("quant_quality", BENCHMARKS / "quant_quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["quant_quality"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("quant_quality", None)


def test_agreement_counts_identical_outputs_and_the_tokens_before_a_difference(qq):
    ref = [[1, 2, 3], [4, 5], [6]]
    assert qq.agreement(ref, [[1, 2, 3], [4, 9], [7]]) == (1, 4, 6)
    assert qq.agreement(ref, [[1, 2], [4, 5, 6], [6]]) == (1, 5, 6)  # a shorter / longer output


def test_next_token_agreement_is_per_position(qq):
    ref = qq.Run("a", 1.0, [1, 2, 3, 4], [[1]])
    assert qq.top1_match(qq.Run("b", 1.0, [1, 2, 0, 4], [[1]]), ref) == "75.00%"
    with pytest.raises(ValueError):
        qq.top1_match(qq.Run("c", 1.0, [1, 2], [[1]]), ref)


def test_the_table_compares_with_llamacpp_defaults_and_lists_its_variants(qq, capsys):
    n = len(qq.PROMPTS)
    outputs = [[1, 2]] * n
    runs = [qq.Run("agentrt x", 10.0, [1, 2, 3, 4], outputs)]
    llama = [qq.Run("llama.cpp", 10.0, [1, 2, 3, 5], outputs),
             qq.Run("llama.cpp, flash attention", 11.0, [1, 9, 3, 5], [[1, 3]] * n)]
    qq.print_table(runs, llama, qq.parse_args(["--tokens", "5", "--max-tokens", "2"]))
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")
            for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert rows["agentrt x"][6:] == ["+0.00%", "75.00%", f"{n}/{n}", f"{2 * n}/{2 * n} |"]
    assert rows["llama.cpp, flash attention"][6:] == ["+10.00%", "75.00%", f"0/{n}",
                                                      f"{n}/{2 * n} |"]


def test_a_short_run_on_the_default_model(qq, capsys):
    qq.main(["--quantization", "auto", "--tokens", "24", "--max-tokens", "2", "--no-llamacpp"])
    out = capsys.readouterr().out
    assert "llama.cpp: skipped (--no-llamacpp)" in out
    row = next(line for line in out.splitlines() if line.startswith("| agentrt auto"))
    assert row.split(" | ")[2:4] == ["+0.00%", "100.00%"]
