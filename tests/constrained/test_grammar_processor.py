"""xgrammar-backed logits processors on the real model: the output stays in the grammar."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

pytest.importorskip("xgrammar", reason="needs the [constrained] or [langchain] extra")

from agentrt import SamplingParams  # noqa: E402
from agentrt.constrained import get_grammar_backend  # noqa: E402

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "population": {"type": "integer"}},
          "required": ["city", "population"]}


@pytest.fixture(scope="module")
def backend(engine):
    return get_grammar_backend(engine)


def test_backend_is_built_once_per_engine(engine, backend):
    assert get_grammar_backend(engine) is backend


def test_json_schema_output_parses_and_matches(engine, chat, backend):
    prompt = chat("Name a big city and its population.")
    out = engine.generate(prompt, SamplingParams(max_tokens=40,
                                                 logits_processor=backend.json_schema(SCHEMA)))
    value = json.loads(out.text)
    assert set(value) == {"city", "population"} and isinstance(value["population"], int)
    assert out.finish_reason == "stop"  # the grammar ended, then only EOS was allowed


def test_ebnf_grammar_restricts_greedy_output(engine, chat, backend):
    proc = backend.ebnf('root ::= ("yes" | "no") "."')
    out = engine.generate(chat("Is the sky green?"),
                          SamplingParams(max_tokens=8, logits_processor=proc))
    assert out.text == "no." and out.finish_reason == "stop"  # then EOS was the only choice


def test_a_diverging_history_is_replayed(engine, backend):
    tok = engine.tokenizer
    a, b = (tok.encode(s, add_special_tokens=False) for s in ('{"city": "Rome"', '{"city": "Oslo'))
    reused, fresh = backend.json_schema(SCHEMA), backend.json_schema(SCHEMA)
    vocab = engine.core.model_config.vocab_size
    reused(a, torch.zeros(vocab))
    assert torch.equal(reused(b, torch.zeros(vocab)), fresh(b, torch.zeros(vocab)))


def test_a_rejected_token_leaves_only_eos(engine, backend):
    proc = backend.ebnf('root ::= "yes"')
    bad = engine.tokenizer.encode("no", add_special_tokens=False)
    row = proc(bad, torch.zeros(engine.core.model_config.vocab_size))
    assert proc.error is not None
    assert set(torch.nonzero(row == 0).flatten().tolist()) == engine.core.eos_token_ids


def test_importing_agentrt_or_the_integration_does_not_import_xgrammar():
    code = ("import sys, agentrt, langchain_agentrt; "
            "assert 'xgrammar' not in sys.modules, 'xgrammar imported eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(("schema", "reason"), [
    ({"type": "object", "properties": {"a": {"type": "fancy"}}}, 'Unsupported type "fancy"'),
    ({"type": "string", "pattern": "(("}, "parenthesis is not closed"),
    # NOTE: xgrammar 0.2.9 quotes the field ('nope'); earlier releases did not
    ({"$ref": "#/nope"}, re.compile(r"Cannot find field '?nope'?")),
])
def test_schema_errors_give_xgrammars_reason_without_its_source_paths(backend, schema, reason):
    with pytest.raises(ValueError) as e:
        backend.json_schema(schema)
    message = str(e.value)
    assert reason.search(message) if isinstance(reason, re.Pattern) else reason in message
    assert ".cc" not in message and "/project/" not in message and "[" not in message[:1]


def test_batched_masks_equal_the_row_by_row_masks(engine, backend):
    """One bitmask copy for all grammar rows (the sampler's path) masks exactly as calling
    each processor on its row: mid-grammar rows, a finished grammar, a rejected token, and
    rows without a grammar or with another processor left alone or processed as before."""
    from types import SimpleNamespace

    from agentrt.engine.sampler import _process

    tok = engine.tokenizer
    partial = tok.encode('{"city": "Ro', add_special_tokens=False)
    done, rejected = (tok.encode(s, add_special_tokens=False) for s in ("no.", "maybe"))
    histories = {"fresh": [], "partial": partial, "done": done, "rejected": rejected}

    def processors():
        made = {"fresh": backend.json_schema(SCHEMA), "partial": backend.json_schema(SCHEMA),
                "done": backend.ebnf('root ::= ("yes" | "no") "."'),
                "rejected": backend.ebnf('root ::= ("yes" | "no") "."')}
        return [(made[k], histories[k]) for k in ("fresh", "partial", "done", "rejected")]

    torch.manual_seed(0)
    logits = torch.randn(6, backend.vocab_size)
    by_row = logits.clone()
    for i, (proc, ids) in enumerate(processors()):
        by_row[i + 1] = proc(ids, by_row[i + 1])
    by_row[5] = by_row[5] * 2

    def double(ids, row):
        return row * 2

    rows = [(None, [])] + processors() + [(double, [])]
    requests = [SimpleNamespace(params=SimpleNamespace(logits_processor=p), output_token_ids=ids)
                for p, ids in rows]
    batched = logits.clone()
    assert _process(batched, requests) == {}
    assert torch.equal(batched, by_row)
    stop = requests[3].params.logits_processor.stop_token_ids
    assert torch.isinf(batched[3]).sum() == batched.shape[1] - len(stop)  # only EOS is left
