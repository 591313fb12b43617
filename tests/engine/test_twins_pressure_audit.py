"""The async continuation twins behave as the sync ones (audit H50).

``aresume`` / ``aresume_stream`` had no test of their own: each continues a paused request
with the same tokens, counters and finish as ``resume`` / ``resume_stream``, and the stream
folds to the whole output.
"""

from __future__ import annotations

from agentrt import RequestOutput, SamplingParams

FIRST, NEXT = SamplingParams(max_tokens=4), SamplingParams(max_tokens=6, ignore_eos=True)


async def test_the_four_ways_of_resuming_agree(engine, chat):
    prompt, appended = chat("Name a fruit."), " And a vegetable?"
    results = []
    for way in ("resume", "aresume", "resume_stream", "aresume_stream"):
        first = await engine.agenerate(prompt, FIRST, keep_kv=True, namespace=f"twins-{way}")
        rid = first.request_id
        if way == "resume":
            out = engine.resume(rid, appended, NEXT, keep_kv=False)
        elif way == "aresume":
            out = await engine.aresume(rid, appended, NEXT, keep_kv=False)
        elif way == "resume_stream":
            out = RequestOutput.from_deltas(list(engine.resume_stream(rid, appended, NEXT,
                                                                      keep_kv=False)))
        else:
            out = RequestOutput.from_deltas([d async for d in engine.aresume_stream(
                rid, appended, NEXT, keep_kv=False)])
        results.append((first.token_ids, out.token_ids, out.text, out.finish_reason,
                        out.num_prompt_tokens, out.num_cached_tokens))
    assert all(r == results[0] for r in results[1:]), results
    assert results[0][3] == "length" and len(results[0][1]) == NEXT.max_tokens
    assert not engine.core.requests and engine.load().num_paused == 0
