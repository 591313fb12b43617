"""Topology-aware batching inside the real engine: the scheduler admits, per graph query,
the primitives deepest in the graph first (Teola Fig. 7), and the graph runtime tags every
model call with its query and depth."""

from __future__ import annotations

from agentrt import EngineConfig, LLMEngine, SamplingParams
from agentrt.backends.call import Call, request_tags
from agentrt.graph import Graph, GraphRuntime, Kind


def test_engine_admits_a_and_h_where_fifo_would_admit_a_and_b(tiny_model):
    # two seats: the period can take two of the four queued 32-token prefills
    core = LLMEngine(EngineConfig(model=tiny_model, dtype="float32", max_num_seqs=2,
                                  profile_on_start=False))
    prompt = list(range(100, 132))
    params = SamplingParams(max_tokens=4)
    for rid, group, depth in [("A", "q1", 4), ("B", "q1", 2), ("G", "q2", 1), ("H", "q2", 2)]:
        core.add_request(prompt, params, request_id=rid, group=group, depth=depth)
    core.step()
    assert [r.request_id for r in core.scheduler.running] == ["A", "H"]
    while core.has_unfinished():
        core.step()


def test_ungrouped_requests_keep_fifo_order(tiny_model):
    core = LLMEngine(EngineConfig(model=tiny_model, dtype="float32", max_num_seqs=2,
                                  profile_on_start=False))
    for rid in "ABCD":
        core.add_request(list(range(100, 132)), SamplingParams(max_tokens=4), request_id=rid)
    core.step()
    assert [r.request_id for r in core.scheduler.running] == ["A", "B"]
    while core.has_unfinished():
        core.step()


def test_runtime_tags_model_calls_with_query_and_depth(engine):
    g = Graph("tags")

    async def read(args):
        call = Call(engine, [1, 2, 3])  # a model call made by the node's op
        return dict(request_tags.get()), (call.options.group, call.options.depth)
    first = g.add(Kind.DECODING, "first", read, {"x": g.input})
    g.output = g.add(Kind.AGGREGATE, "join", read, {"a": first})
    runtime = GraphRuntime()
    out = runtime.run(g, None, query_id="q7")
    assert out == ({"group": "q7", "depth": 0}, ("q7", 0))
    assert runtime.last_store == {} and request_tags.get() == {}
    assert Call(engine, [1]).options.group is None  # outside a graph: untagged
