"""The constrained answer may start with the reasoning block of the template's own syntax:
``<think>`` (Qwen3, DeepSeek-R1) or Magistral's ``[THINK]`` (read as text here: SmolLM2's
vocabulary has no such special token)."""

from __future__ import annotations

import json

import pytest

from agentrt.chat.grammar import output_structural_tag

xgr = pytest.importorskip("xgrammar")

TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "The time.",
    "parameters": {"type": "object", "properties": {}}}}
CALL = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


@pytest.fixture(scope="module")
def accepts(tokenizer):
    info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    compiler = xgr.GrammarCompiler(info)

    def check(reasoning: str, text: str) -> bool:
        tag = output_structural_tag([TOOL], "required", reasoning=reasoning)
        grammar = xgr.Grammar.from_structural_tag(json.dumps(tag))
        matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar))
        if not matcher.accept_string(text):
            return False
        return matcher.is_terminated() or (matcher.accept_token(info.stop_token_ids[0])
                                           and matcher.is_terminated())

    return check


@pytest.mark.parametrize("reasoning, opened, closed", [
    ("detect", "<think>", "</think>\n\n"), ("detect_mistral", "[THINK]", "[/THINK]")])
def test_a_detected_block_is_optional_and_of_its_own_syntax(accepts, reasoning, opened, closed):
    assert accepts(reasoning, CALL)
    assert accepts(reasoning, f"{opened}Maybe.{closed}{CALL}")
    other = "[THINK]Maybe.[/THINK]" if opened == "<think>" else "<think>Maybe.</think>\n\n"
    assert not accepts(reasoning, other + CALL)


@pytest.mark.parametrize("reasoning, closed", [("open", "</think>\n\n"),
                                               ("open_mistral", "[/THINK]")])
def test_an_opened_block_must_close_first(accepts, reasoning, closed):
    assert accepts(reasoning, f"Maybe.{closed}{CALL}")
    assert not accepts(reasoning, CALL)
