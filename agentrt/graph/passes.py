"""Teola's rewrite passes over a primitive graph, and the optimised-graph cache.

* :func:`prune_dependencies` — drop control edges that carry no data, so independent
  branches (query expansion ∥ document embedding) run in parallel.
* :func:`decompose_stages` — split a batchable primitive whose batch exceeds the engine's
  efficient size into micro-batches, pipelined into the next batchable primitive, joined by
  an Aggregate.
* :func:`split_prefill` — prefill the part of a prompt known early (instruction, question)
  while retrieval still runs (PartialPrefilling), then the rest (FullPrefilling).
* :func:`pipeline_decoding` — for a splittable output (a list), forward each item downstream
  the moment it is decoded (PartialDecoding), one per expected item, plus the remainder.

:func:`optimize` applies them until nothing changes; graphs of the same structure reuse
the first optimised plan's decisions (the cache is keyed by :meth:`Graph.structure_key`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrt.graph.ir import Graph, Kind, Node
from agentrt.graph.runtime import SKIPPED, current_node, gather
from agentrt.graph.streams import ItemStream

__all__ = [
    "PASSES", "decompose_stages", "optimize", "pipeline_decoding", "prune_dependencies",
    "split_prefill",
]

EARLY_KINDS = frozenset({Kind.INPUT, Kind.TRANSFORM, Kind.AGGREGATE})
"""Primitives cheap enough that what only they produce counts as known at the start."""
DEFAULT_NUM_ITEMS = 3


def prune_dependencies(graph: Graph) -> bool:
    """Remove every control edge (``after``): order that carries no data."""
    changed = False
    for node in graph:
        if node.after:
            node.after.clear()
            changed = True
    return changed


def split_prefill(graph: Graph) -> bool:
    """Prefilling whose variables arrive at different times → PartialPrefilling of the early
    ones (their KV computed while the late ones are produced) + FullPrefilling."""
    changed = False
    for node in list(graph.find(Kind.PREFILLING)):
        partial_op = node.attrs.get("partial_op")
        source = node.inputs.get("x")
        if partial_op is None or source is None or source.kind is not Kind.AGGREGATE:
            continue
        early = {p: s for p, s in source.inputs.items() if _is_early(graph, s)}
        if not early or len(early) == len(source.inputs):
            continue  # nothing arrives late (or nothing early): one prefill is as good
        partial = graph.add(Kind.PARTIAL_PREFILLING, "partial prefill", partial_op, early,
                            engine="llm", early=tuple(early))
        node.kind, node.name = Kind.FULL_PREFILLING, "full prefill"
        for decode in graph.children(node):
            if decode.kind is Kind.DECODING:
                decode.inputs["prefill"] = partial
        changed = True
    return changed


def pipeline_decoding(graph: Graph) -> bool:
    """A splittable Decoding read by a per-item map → PartialDecoding per expected item."""
    changed = False
    for decode in list(graph.find(Kind.DECODING)):
        if not decode.attrs.get("splittable") or "stream_op" not in decode.attrs:
            continue
        parse = next((c for c in graph.children(decode) if c.attrs.get("list_parser")), None)
        consumers = graph.children(parse) if parse is not None else []
        mapper = next((c for c in consumers if "item_op" in c.attrs), None)
        if mapper is None:
            continue
        _pipeline(graph, decode, parse, mapper)
        changed = True
    return changed


def decompose_stages(graph: Graph) -> bool:
    """A batchable primitive with more inputs than ``max_batch_size`` → micro-batches, each
    feeding its own copy of the next batchable primitive, joined by an Aggregate."""
    changed = False
    for node in list(graph):
        size, limit = node.attrs.get("batch_size"), node.attrs.get("max_batch_size")
        if not node.attrs.get("batchable") or not size or not limit or size <= limit:
            continue
        nxt = [c for c in graph.children(node) if c.attrs.get("batchable")]
        _decompose(graph, node, nxt[0] if len(nxt) == 1 else None, size, limit)
        changed = True
    return changed


PASSES: list[Callable[[Graph], bool]] = [
    prune_dependencies, decompose_stages, split_prefill, pipeline_decoding,
]

_cache: dict[tuple, list[str]] = {}


def optimize(graph: Graph, passes: list[Callable[[Graph], bool]] | None = None) -> Graph:
    """Apply the passes until none changes the graph (in place; returns it). The sequence
    of passes that fired is cached by structure, so equal graphs skip the search."""
    key = graph.structure_key()
    plan = _cache.get(key)
    if plan is not None:
        for name in plan:
            _BY_NAME[name](graph)
        graph.applied = list(plan)
        return graph
    fired: list[str] = []
    for _ in range(8):
        progress = False
        for p in passes or PASSES:
            if p(graph):
                fired.append(p.__name__)
                progress = True
        if not progress:
            break
    _cache[key] = fired
    graph.applied = fired
    return graph


_BY_NAME = {p.__name__: p for p in PASSES}


# --- helpers ---------------------------------------------------------------------------------
def _is_early(graph: Graph, node: Node) -> bool:
    return all(n.kind in EARLY_KINDS for n in [node, *graph.ancestors(node)])


def _pipeline(graph: Graph, decode: Node, parse: Node, mapper: Node) -> None:
    k = int(decode.attrs.get("num_items", DEFAULT_NUM_ITEMS))
    stream_op, parser, item_op = decode.attrs["stream_op"], parse.attrs.get("parser"), \
        mapper.attrs["item_op"]
    parser = parser or decode.attrs.get("parser")

    async def start(args: dict[str, Any]) -> ItemStream:
        stream = ItemStream()
        items = stream_op(parser, args["prompt"], args.get("prefill"))
        current_node().spawn(lambda: stream.fill(items))
        return stream
    decode.op = start
    decode.attrs["pipelined"] = True

    async def collect(args: dict[str, Any]) -> list[Any]:
        return await args["x"].all()
    parse.op = collect
    others = {p: s for p, s in mapper.inputs.items() if s is not parse}  # e.g. the index
    outs: dict[str, Node] = {}
    for i in range(k):
        part = graph.add(Kind.PARTIAL_DECODING, f"item {i}", _nth(i), {"stream": decode},
                         engine="llm", item=i)
        outs[f"i{i}"] = graph.add(mapper.kind, f"{mapper.name}[{i}]", _each(item_op),
                                  {**others, "x": part}, engine=mapper.engine)
    outs["rest"] = graph.add(mapper.kind, f"{mapper.name}[{k}:]", _rest(item_op, k),
                             {**others, "stream": decode}, engine=mapper.engine)
    join = graph.add(Kind.AGGREGATE, "items", _join, outs, select=True)
    graph.replace_input(mapper, join)
    graph.remove(mapper)
    if not graph.children(parse) and graph.output is not parse:
        graph.remove(parse)


def _nth(i: int):
    async def op(args: dict[str, Any]) -> Any:
        return await args["stream"].item(i)
    return op


def _each(item_op):
    async def op(args: dict[str, Any]) -> Any:
        return await item_op(args["x"])
    return op


def _rest(item_op, k: int):
    async def op(args: dict[str, Any]) -> list[Any]:
        return await gather(item_op, (await args["stream"].all())[k:])
    return op


async def _join(args: dict[str, Any]) -> list[Any]:
    from agentrt.graph.runtime import Failed

    rest = args.pop("rest")
    for v in [*args.values(), rest]:
        if isinstance(v, Failed):
            raise v.error
    return [v for v in args.values() if v is not SKIPPED] + list(rest)


def _decompose(graph: Graph, node: Node, nxt: Node | None, size: int, limit: int) -> None:
    """Replace ``node`` (and ``nxt``) by micro-batch copies over slices of its input."""
    outs: dict[str, Node] = {}
    for start in range(0, size, limit):
        sl = slice(start, min(size, start + limit))
        part = graph.add(node.kind, f"{node.name}[{sl.start}:{sl.stop}]", _sliced(node.op, sl),
                         dict(node.inputs), engine=node.engine, batchable=True,
                         batch_size=sl.stop - sl.start, max_batch_size=limit)
        if nxt is not None:
            port = next(p for p, s in nxt.inputs.items() if s is node)
            inputs = {**nxt.inputs, port: part}
            part = graph.add(nxt.kind, f"{nxt.name}[{sl.start}:{sl.stop}]",
                             _sliced(nxt.op, sl, keep=port), inputs, engine=nxt.engine)
        outs[f"part{len(outs)}"] = part
    join = graph.add(Kind.AGGREGATE, f"join {node.name}", _concat, outs)
    last = nxt if nxt is not None else node
    graph.replace_input(last, join)
    for n in [nxt, node] if nxt is not None else [node]:
        graph.remove(n)


def _sliced(op, sl: slice, keep: str | None = None):
    """``op`` over the slice ``sl`` of every list input (but port ``keep``)."""
    async def part(args: dict[str, Any]) -> Any:
        return await op({p: v[sl] if isinstance(v, list) and p != keep else v
                         for p, v in args.items()})
    return part


async def _concat(args: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for v in args.values():
        out.extend(v if isinstance(v, list) else [v])
    return out
