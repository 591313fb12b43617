"""Lower a LangChain runnable (LCEL) into agentrt's primitive graph by walking its objects.

``Runnable.get_graph()`` is not enough: it draws a branch or a fallback as one box. So the
walker opens the runnables themselves, one registered rule per construct (first match
wins; subclasses are listed before their bases). Each rule gets the node producing the
runnable's input and returns the node producing its output. What has no rule becomes an
``Opaque`` node that runs the runnable as LangChain would: lowering never fails a chain
that LangChain can run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import BaseOutputParser, ListOutputParser
from langchain_core.prompts import BasePromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableBranch,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSequence,
    RunnableWithFallbacks,
)
from langchain_core.runnables.base import RunnableEach
from langchain_core.runnables.config import (
    RunnableConfig,
    ensure_config,
    get_async_callback_manager_for_config,
    merge_configs,
    patch_config,
)
from langchain_core.runnables.passthrough import RunnableAssign, RunnablePick

from agentrt.graph import SKIPPED, Failed, Graph, GraphRuntime, Kind, Node, current_node, optimize
from agentrt.graph.ir import Around
from agentrt.graph.runtime import gather
from langchain_agentrt.lowering import llm as llm_ops

if TYPE_CHECKING:
    from agentrt.backends.base import Backend

__all__ = ["RULES", "lower_runnable"]

Rule = Callable[["Walker", Any, Node], Node]


def lower_runnable(runnable: Runnable, name: str | None = None, *,
                   backend: Backend | None = None) -> Graph:
    """The primitive graph of ``runnable`` (unoptimised; see :func:`agentrt.graph.optimize`);
    its ``ChatAgentRT`` calls run on ``backend`` (None: each model's own)."""
    graph = Graph(name or runnable.get_name())
    graph.output = Walker(graph, backend).lower(runnable, graph.input)
    graph.around = _around(graph.name)
    return graph


def _around(name: str) -> Around:
    """One run as LangChain runs a runnable: a root run for the config's callbacks (named
    ``run_name`` or the chain's name), whose child config the nodes' runnables get."""
    async def around(run: Callable[[Any, Any], Awaitable[Any]], value: Any,
                     config: RunnableConfig | None) -> Any:
        config = ensure_config(config)
        manager = get_async_callback_manager_for_config(config)
        root = await manager.on_chain_start(None, value, name=config.get("run_name") or name,
                                            run_id=config.pop("run_id", None))
        try:
            out = await run(value, patch_config(config, callbacks=root.get_child()))
        except BaseException as exc:
            await root.on_chain_error(exc)
            raise
        await root.on_chain_end(out)
        return out
    return around


class Walker:
    def __init__(self, graph: Graph, backend: Backend | None = None,
                 config: RunnableConfig | None = None) -> None:
        self.graph = graph
        self.backend = backend
        """Where the lowered ``ChatAgentRT`` calls run (None: each model's own backend)."""
        self.config = config
        """Config of the ``with_config`` bindings around what is being lowered."""

    def lower(self, r: Any, src: Node) -> Node:
        for kind, rule in RULES:
            if isinstance(r, kind):
                return rule(self, r, src)
        return self.runnable_node(Kind.OPAQUE, r, src)

    def runnable_node(self, kind: Kind, r: Runnable, src: Node, name: str | None = None,
                      **attrs: Any) -> Node:
        """A node that runs ``r.ainvoke`` on its one input."""
        static = self.config

        async def op(args: dict[str, Any]) -> Any:
            return await r.ainvoke(args["x"], llm_ops.call_config(static))
        return self.graph.add(kind, name or r.get_name(), op, {"x": src}, **attrs)


# --- composition -----------------------------------------------------------------------------
def _sequence(w: Walker, r: RunnableSequence, src: Node) -> Node:
    for step in r.steps:
        src = w.lower(step, src)
    return src


def _parallel(w: Walker, r: RunnableParallel, src: Node) -> Node:
    outs = {key: w.lower(branch, src) for key, branch in r.steps__.items()}

    async def join(args: dict[str, Any]) -> dict[str, Any]:
        return dict(args)
    return w.graph.add(Kind.AGGREGATE, "parallel", join, outs)


def _assign(w: Walker, r: RunnableAssign, src: Node) -> Node:
    outs = {key: w.lower(branch, src) for key, branch in r.mapper.steps__.items()}

    async def merge(args: dict[str, Any]) -> dict[str, Any]:
        base = args.pop("__input__")
        if not isinstance(base, dict):
            raise ValueError("The input to RunnablePassthrough.assign() must be a dict.")
        return {**base, **args}
    return w.graph.add(Kind.AGGREGATE, "assign", merge, {"__input__": src, **outs})


def _pick(w: Walker, r: RunnablePick, src: Node) -> Node:
    return w.runnable_node(Kind.TRANSFORM, r, src, f"pick {r.keys}")


def _passthrough(w: Walker, r: RunnablePassthrough, src: Node) -> Node:
    if r.func is None and r.afunc is None:
        return src
    return w.runnable_node(Kind.TRANSFORM, r, src, "passthrough")


def _lambda(w: Walker, r: RunnableLambda, src: Node) -> Node:
    return w.runnable_node(Kind.TRANSFORM, r, src)


def _binding(w: Walker, r: RunnableBinding, src: Node) -> Node:
    if isinstance(r.bound, BaseChatModel):
        return llm_ops.lower_chat_model(w.graph, r, r.bound, src, w.backend, w.config)
    if r.kwargs or r.config_factories or isinstance(r.bound, RunnableEach):
        return w.runnable_node(Kind.OPAQUE, r, src)
    if not r.config:
        return w.lower(r.bound, src)
    # the binding's config (tags, callbacks, configurable...) reaches every lowered runnable;
    # its run_name names one run, which the lowered runnables are not
    config = {k: v for k, v in r.config.items() if k not in ("run_name", "run_id")}
    return Walker(w.graph, w.backend, merge_configs(w.config, config)).lower(r.bound, src)


def _each(w: Walker, r: RunnableEach, src: Node) -> Node:
    """``.map()``: the bound runnable lowered once into a graph that runs per item (items
    concurrently, in the same query); the node takes the kind of its costliest primitive."""
    sub = Graph(f"map({r.bound.get_name()})")
    sub.output = Walker(sub, w.backend, w.config).lower(r.bound, sub.input)
    optimize(sub)

    async def item_op(item: Any) -> Any:
        ctx = current_node()
        return await GraphRuntime().arun(sub, item, query_id=ctx.query_id,
                                         depth_offset=ctx.node.depth, config=ctx.config)

    async def op(args: dict[str, Any]) -> list[Any]:
        return await gather(item_op, list(args["x"]))
    kind = next((k for k in _COSTLIEST if sub.find(k)), Kind.TRANSFORM)
    return w.graph.add(kind, sub.name, op, {"x": src}, engine=_ENGINES.get(kind, "cpu"),
                       batchable=True, item_op=item_op, subgraph=sub)


_COSTLIEST = (Kind.DECODING, Kind.OPAQUE, Kind.SEARCHING, Kind.EMBEDDING)
_ENGINES = {Kind.DECODING: "llm", Kind.SEARCHING: "vector", Kind.EMBEDDING: "embedding"}


# --- control flow ----------------------------------------------------------------------------
def _branch(w: Walker, r: RunnableBranch, src: Node) -> Node:
    conditions, static = [cond for cond, _ in r.branches], w.config

    async def choose(args: dict[str, Any]) -> int:
        for i, cond in enumerate(conditions):
            if await cond.ainvoke(args["x"], llm_ops.call_config(static)):
                return i
        return len(conditions)
    cond_node = w.graph.add(Kind.CONDITION, "branch", choose, {"x": src})
    targets = [b for _, b in r.branches] + [r.default]
    outs = {}
    for i, target in enumerate(targets):
        gate = w.graph.add(Kind.TRANSFORM, f"when {i}", _gate(i), {"x": src, "cond": cond_node})
        outs[f"b{i}"] = w.lower(target, gate)
    return w.graph.add(Kind.AGGREGATE, "branch join", _select, outs, select=True)


def _gate(i: int):
    async def gate(args: dict[str, Any]) -> Any:
        return args["x"] if args["cond"] == i else SKIPPED
    return gate


def _fallbacks(w: Walker, r: RunnableWithFallbacks, src: Node) -> Node:
    if r.exception_key is not None:
        return w.runnable_node(Kind.OPAQUE, r, src)
    handled = r.exceptions_to_handle
    prev = w.lower(r.runnable, src)
    outs = {"try0": prev}
    for j, fallback in enumerate(r.fallbacks, 1):
        gate = w.graph.add(Kind.CONDITION, f"on error {j}", _catch(handled),
                           {"x": src, "prev": prev}, catch=True)
        prev = outs[f"try{j}"] = w.lower(fallback, gate)
    return w.graph.add(Kind.AGGREGATE, "fallback join", _select, outs, select=True)


def _catch(handled: tuple[type[BaseException], ...]):
    async def catch(args: dict[str, Any]) -> Any:
        prev = args["prev"]
        if isinstance(prev, Failed) and isinstance(prev.error, handled):
            return args["x"]
        return SKIPPED if not isinstance(prev, Failed) else prev
    return catch


async def _select(args: dict[str, Any]) -> Any:
    """The first value that is neither skipped nor failed (else the first failure, as
    LangChain's fallbacks raise the primary's error when every fallback failed too)."""
    failure = None
    for v in args.values():
        if isinstance(v, Failed):
            failure = failure or v
        elif v is not SKIPPED:
            return v
    if failure is not None:
        raise failure.error
    return SKIPPED


# --- components ------------------------------------------------------------------------------
def _prompt(w: Walker, r: BasePromptTemplate, src: Node) -> Node:
    return w.runnable_node(Kind.TRANSFORM, r, src, "format", template=r,
                           variables=tuple(r.input_variables))


def _chat_model(w: Walker, r: BaseChatModel, src: Node) -> Node:
    return llm_ops.lower_chat_model(w.graph, r, r, src, w.backend, w.config)


def _retriever(w: Walker, r: BaseRetriever, src: Node) -> Node:
    return llm_ops.lower_retriever(w, r, src)


def _parser(w: Walker, r: BaseOutputParser, src: Node) -> Node:
    node = w.runnable_node(Kind.TRANSFORM, r, src, "parse")
    if isinstance(r, ListOutputParser) and src.kind is Kind.DECODING:
        src.attrs.update(splittable=True, parser=r)
        node.attrs["list_parser"] = True
    return node


RULES: list[tuple[type, Rule]] = [
    (RunnableSequence, _sequence),
    (RunnableParallel, _parallel),
    (RunnableAssign, _assign),
    (RunnablePick, _pick),
    (RunnablePassthrough, _passthrough),
    (RunnableLambda, _lambda),
    (RunnableBranch, _branch),
    (RunnableWithFallbacks, _fallbacks),
    (RunnableEach, _each),
    (RunnableBinding, _binding),
    (BasePromptTemplate, _prompt),
    (BaseChatModel, _chat_model),
    (BaseRetriever, _retriever),
    (BaseOutputParser, _parser),
]
"""Construct → rule; first match wins. Append to lower your own runnables."""
