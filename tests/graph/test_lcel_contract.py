"""compile(chain) keeps LangChain's Runnable contract: the chains people write give
``chain.invoke``'s result, and the call protocol (config, batch with return_exceptions,
stream, max_concurrency), errors and cancellation behave as LangChain's own runnable."""

from __future__ import annotations

import asyncio
from operator import itemgetter

import anyio
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import (
    JsonOutputParser,
    PydanticOutputParser,
    StrOutputParser,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder, PromptTemplate
from langchain_core.runnables import (
    Runnable,
    RunnableBranch,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
)
from pydantic import BaseModel

from agentrt.graph import compile
from langchain_agentrt import ChatAgentRT


class Boom(RuntimeError):
    pass


def boom(x):
    raise Boom(f"bad input {x!r}")


@pytest.fixture(scope="module")
def llm(engine):
    return ChatAgentRT(engine=engine, max_tokens=6)


def same(chain: Runnable, value) -> object:
    expected = chain.invoke(value)
    assert compile(chain).invoke(value) == expected
    return expected


def assert_idle(engine):
    load = engine.load()
    assert load.num_free_blocks + load.num_evictable_blocks == load.num_total_blocks


# --- results ---------------------------------------------------------------------------------
def test_everyday_constructs_give_langchains_result(llm):
    prompt = ChatPromptTemplate.from_messages([
        ("system", "You are {persona}."), MessagesPlaceholder("history"),
        ("user", "{question}")]).partial(persona="terse")
    chain = (
        RunnablePassthrough.assign(n=lambda d: len(d["question"]))
        | {"question": itemgetter("question"), "history": RunnableLambda(lambda d: []),
           "n": itemgetter("n")}
        | RunnablePassthrough.assign(answer=prompt | llm.bind(stop=["."]) | StrOutputParser())
        | RunnableLambda(lambda d: {k: d[k] for k in ("answer", "n")}).with_config(
            run_name="pick")
    )
    out = same(chain, {"question": "Name a color"})
    assert out["n"] == len("Name a color") and isinstance(out["answer"], str)


def test_plain_string_input_lambdas_branches_and_nesting(llm):
    async def shout(s: str) -> str:
        return s.upper()

    inner = PromptTemplate.from_template("Say {word}") | llm | StrOutputParser()
    branch = RunnableBranch((lambda s: len(s) > 3, RunnableLambda(shout)),
                            RunnableLambda(lambda s: RunnableLambda(lambda _: s * 2)))
    chain = RunnableParallel(word=branch, raw=RunnablePassthrough()) | {
        "said": inner.with_retry(stop_after_attempt=2), "raw": itemgetter("raw")}
    fast = compile(chain)
    for value in ("hi", "hello"):  # an async-only lambda: LangChain runs it with ainvoke
        expected = anyio.run(chain.ainvoke, value)
        assert anyio.run(fast.ainvoke, value) == expected and expected["raw"] == value


def test_fallbacks_when_the_primary_raises(llm):
    chain = RunnableLambda(boom).with_fallbacks([RunnableLambda(lambda x: f"ok {x}")])
    assert same(chain, "q") == "ok q"


def _bad(x):
    raise ValueError("v1")


@pytest.mark.parametrize(("chain", "value", "config"), [
    (RunnablePassthrough(), 5, None),
    (RunnablePassthrough.assign(a=lambda x: 1), 5, None),  # LangChain's ValueError
    (RunnableLambda(itemgetter("a")), {"b": 1}, None),
    (RunnableParallel(a=RunnableLambda(_bad), b=RunnableLambda(boom)), 1, None),
    (RunnableBranch((lambda x: _bad(x), lambda x: 1), lambda x: 2), 1, None),
    (RunnableLambda(_bad).with_fallbacks([RunnableLambda(boom)]), 1, None),
    (RunnableLambda(_bad).with_fallbacks([RunnableLambda(lambda x: 3)],
                                         exceptions_to_handle=(KeyError,)), 1, None),
    (RunnableLambda(_bad).with_fallbacks([RunnableLambda(str)], exception_key="e"),
     {"q": 1}, None),
    (PromptTemplate.from_template("Q {q} {r}"), {"q": 1}, None),
    (RunnableLambda(lambda x, config: (config["tags"], config["configurable"]["k"])), 1,
     {"tags": ["a"], "configurable": {"k": 7}}),
    (RunnableLambda(lambda x: x + 1).map(), [1, 2], None),
    (RunnableLambda(_bad).with_retry(stop_after_attempt=2, wait_exponential_jitter=False), 1,
     None),
], ids=lambda v: type(v).__name__)
def test_cpu_chains_give_langchains_value_or_error(chain, value, config):
    def outcome(run):
        try:
            return "ok", run(value, config)
        except Exception as exc:  # noqa: BLE001 - compared below
            return type(exc), str(exc)
    assert outcome(compile(chain).invoke) == outcome(chain.invoke)


def test_json_and_pydantic_parsers():
    class Point(BaseModel):
        x: int
        y: int

    fake = RunnableLambda(lambda _: '{"x": 1, "y": 2}')
    assert same(fake | JsonOutputParser(), "p") == {"x": 1, "y": 2}
    assert same(fake | PydanticOutputParser(pydantic_object=Point), "p") == Point(x=1, y=2)


# --- protocol --------------------------------------------------------------------------------
class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[tuple[str | None, list[str]]] = []
        self.ends = self.runs = 0

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, tags=None,
                       metadata=None, **kwargs):
        self.runs += 1
        if parent_run_id is None:
            self.starts.append((kwargs.get("name"), list(tags or [])))

    def on_chain_end(self, outputs, *, run_id, parent_run_id=None, **kwargs):
        if parent_run_id is None:
            self.ends += 1


def test_invoke_takes_langchains_config():
    chain = RunnableLambda(lambda x: x + 1) | RunnableLambda(lambda x: x * 2)
    seen, fast = Recorder(), compile(chain)
    bound = Recorder()  # a with_config(callbacks=...) inside the chain still sees its runs
    inner = compile(RunnableLambda(lambda x: x) | chain.with_config(callbacks=[bound]))
    assert inner.invoke(1) == 4 and bound.runs == 2
    config = {"callbacks": [seen], "tags": ["t1"], "run_name": "mine"}
    assert fast.invoke(1, config=config) == chain.invoke(1, config=config) == 4
    assert seen.starts == [("mine", ["t1"])] * 2 and seen.ends == 2
    assert anyio.run(lambda: fast.ainvoke(1, {"tags": ["x"]})) == 4


def test_batch_return_exceptions_puts_each_error_in_its_slot():
    chain = RunnableLambda(lambda x: x if x % 2 else boom(x))
    fast = compile(chain)
    expected = chain.batch([1, 2, 3], return_exceptions=True)
    got = fast.batch([1, 2, 3], return_exceptions=True)
    assert got[0::2] == expected[0::2] == [1, 3]
    assert type(got[1]) is Boom and str(got[1]) == str(expected[1])
    got = anyio.run(lambda: fast.abatch([1, 2, 3], return_exceptions=True))
    assert got[0::2] == [1, 3] and type(got[1]) is Boom
    with pytest.raises(Boom, match="bad input 2"):
        fast.batch([1, 2, 3])
    with pytest.raises(Boom):
        anyio.run(fast.abatch, [1, 2])


def test_batch_honours_max_concurrency():
    running = peak = 0

    async def step(x):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return x

    fast = compile(RunnableLambda(step))
    assert fast.batch(list(range(6)), config={"max_concurrency": 2}) == list(range(6))
    assert peak == 2
    assert fast.batch([], config={"max_concurrency": 2}) == []


def test_stream_and_astream_yield_the_result(llm):
    chain = PromptTemplate.from_template("Say {word}") | llm | StrOutputParser()
    fast, value = compile(chain), {"word": "hi"}
    expected = chain.invoke(value)
    assert "".join(fast.stream(value)) == expected

    async def collect():
        return [c async for c in fast.astream(value)]
    assert "".join(anyio.run(collect)) == expected


def test_invoke_works_inside_a_running_event_loop():
    fast = compile(RunnableLambda(lambda x: x + 1))

    async def main():
        return fast.invoke(1), fast.batch([1, 2])
    assert anyio.run(main) == (2, [2, 3])


# --- errors ----------------------------------------------------------------------------------
def test_lambda_error_propagates_like_langchain(llm, engine):
    chain = PromptTemplate.from_template("{q}") | llm | StrOutputParser() | RunnableLambda(boom)
    with pytest.raises(Boom) as lc:
        chain.invoke({"q": "hi"})
    with pytest.raises(Boom) as ours:
        compile(chain).invoke({"q": "hi"})
    assert str(ours.value) == str(lc.value)
    assert_idle(engine)
    ok = PromptTemplate.from_template("{q}") | llm | StrOutputParser()
    assert same(ok, {"q": "hi"})  # the engine still serves


def test_missing_prompt_variable_is_langchains_error(llm):
    chain = ChatPromptTemplate.from_template("{a} and {b}") | llm
    with pytest.raises(KeyError) as lc:
        chain.invoke({"a": 1})
    with pytest.raises(type(lc.value)) as ours:
        compile(chain).invoke({"a": 1})
    assert str(ours.value) == str(lc.value)


@pytest.mark.parametrize("call", [
    lambda fast: fast.ainvoke({"x": "1, 2"}),
    lambda fast: fast.abatch([{"x": "1, 2"}, {"x": "3, 4"}]),
], ids=["ainvoke", "abatch"])
def test_a_cancelled_call_leaves_no_running_request(engine, call):
    llm = ChatAgentRT(engine=engine, max_tokens=400)
    fast = compile(PromptTemplate.from_template("Count to 500: {x}") | llm)

    async def main():
        with anyio.move_on_after(0.5):
            await call(fast)
    anyio.run(main)
    assert anyio.run(lambda: _wait_idle(engine)), \
        "a request kept running after its call was cancelled"
    assert_idle(engine)


async def _wait_idle(engine) -> bool:
    for _ in range(100):
        load = engine.load()
        if load.num_running == load.num_waiting == 0:
            return True
        await anyio.sleep(0.05)
    return False


# --- compile time ----------------------------------------------------------------------------
@pytest.mark.parametrize("obj", [42, "chain", lambda x: x, None])
def test_compile_of_a_non_runnable_is_a_type_error(obj):
    with pytest.raises(TypeError, match="lower"):
        compile(obj)


def test_compiling_twice_and_drawing(llm):
    chain = RunnableParallel(a=RunnablePassthrough(), b=PromptTemplate.from_template("{x}") | llm)
    first, second = compile(chain), compile(chain)
    assert first.graph is not second.graph
    assert first.invoke({"x": "hi"})["b"].content == second.invoke({"x": "hi"})["b"].content
    assert "Decoding" in str(first.graph) and first.graph.to_mermaid().startswith("flowchart")
