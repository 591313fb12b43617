"""Executor: a drop-in for LangChain's ``AgentExecutor`` that runs an agent as one session.

It *is* an ``AgentExecutor`` — same fields, same ``invoke/ainvoke/stream/astream/batch``,
same outputs and callbacks — so a program changes one name and nothing else. What changes is
underneath: the run executes inside :func:`agentrt.session.agent_run`, so every call the
agent makes to a :class:`~langchain_agentrt.ChatAgentRT` continues one session on that
model's backend (on the local engine: one paused request) instead of starting over. The
prompt is prefilled once; the model's own tokens stay in the KV cache; each re-rendered
prompt only appends the observation (rolling back a seam that re-tokenizes differently, so
the model sees exactly what a fresh call would); and while a tool runs, the request is
paused — its KV preserved, swapped or discarded by the engine's interception policy, which
learns each tool's duration from the tool's name. A ReAct agent's calls are
grammar-constrained to the ReAct format (when the model is constrained, the default), so its
steps always parse. When the tools are agentrt tools, they start while the model writes the
call (:mod:`langchain_agentrt.partial`). On a backend that cannot pause in place (an SGLang
server) each step is appended to the server's session and the tools read the streamed tokens
here; :attr:`Executor.session_stats` names the backend and counts the tokens it prefilled
and kept.

With any other model nothing routes through a session, and the Executor is exactly
``AgentExecutor``: drop-in means never worse.

A run is one ``invoke``, one ``stream`` or one ``iter``; only the agent's own model calls are
in it. A tool runs outside it (a tool that calls the model itself gets no ReAct grammar and no
place in the agent's session), and so does the caller's code between two streamed chunks.

A tool that raises ends the run exactly as under ``AgentExecutor``: LangChain's own
``BaseTool.handle_tool_error`` (``True`` / a string / a callable, for ``ToolException``) is
respected as usual. Two opt-in additions: ``handle_tool_error`` on the Executor, the same
three forms, turns any exception of a tool that leaves its own flag unset into an observation
the model can react to; ``tool_timeout`` gives a tool that outlives it a timeout observation.
Needs ``langchain-classic``: ``pip install 'langchain-agentrt[executor]'``.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from langchain_core.agents import AgentAction, AgentFinish, AgentStep
from langchain_core.tools import BaseTool
from pydantic import PrivateAttr

from agentrt.session import SessionScope, SessionStats, agent_run, current_scope
from langchain_agentrt.partial import partial_execution_for
from langchain_agentrt.react import is_react_agent, react_grammar
from langchain_agentrt.repeats import DEFAULT_MAX_REPEATS, repeat_message, repeated_call

try:
    from langchain_classic.agents import AgentExecutor, AgentExecutorIterator
except ImportError as exc:  # NOTE: ChatAgentRT needs only langchain-core; the Executor more
    raise ImportError("agentrt.Executor needs langchain-classic (LangChain's AgentExecutor): "
                      "pip install 'langchain-agentrt[executor]'") from exc

__all__ = ["Executor"]

ToolErrorHandler = bool | str | Callable[[Exception], str]


class Executor(AgentExecutor):
    """``AgentExecutor`` whose runs keep the model's KV across steps (see module docs)."""

    handle_tool_error: ToolErrorHandler = False
    """For tools whose own ``handle_tool_error`` is unset: ``False`` re-raises what the tool
    raised (``AgentExecutor``'s behaviour); ``True`` makes the exception's message the
    observation, a string replaces it, a callable maps the exception to it. Unlike the tool's
    own flag (``ToolException`` only) it covers any ``Exception``."""

    tool_timeout: float | None = None
    """Seconds a tool may run before its step gets a timeout observation (None = no limit)."""

    max_repeats: int | None = DEFAULT_MAX_REPEATS
    """Identical tool calls (tool and input) in a row after which the run ends with a message
    saying so, instead of a model call that would repeat it again; None: no such guard."""

    name: str | None = "AgentExecutor"
    """The run's name in callbacks, traces and ``astream_events``: ``AgentExecutor``'s, so that
    a program that picks the executor's events by name finds them."""

    _last_scope: SessionScope | None = PrivateAttr(default=None)

    @property
    def session_stats(self) -> SessionStats | None:
        """Tokens re-rendered vs computed in the most recent run (None before any run)."""
        return self._last_scope.stats if self._last_scope is not None else None

    # --- runs: each in its own session scope --------------------------------------------------
    def _call(self, inputs: dict[str, Any], run_manager: Any = None) -> dict[str, Any]:
        with agent_run(self._new_scope()):
            return super()._call(inputs, run_manager=run_manager)

    async def _acall(self, inputs: dict[str, Any], run_manager: Any = None) -> dict[str, Any]:
        with agent_run(self._new_scope()):
            return await super()._acall(inputs, run_manager=run_manager)

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:
        """``AgentExecutor.stream`` (actions, steps, output), as one session run."""
        return _scoped(self._new_scope, super().stream(input, config, **kwargs))

    def astream(self, input: Any, config: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        """Async twin of :meth:`stream`."""
        return _ascoped(self._new_scope, super().astream(input, config, **kwargs))

    def iter(self, inputs: Any, callbacks: Any = None, *, include_run_info: bool = False,
             async_: bool = False) -> AgentExecutorIterator:
        """``AgentExecutor.iter``, each iteration of the steps being one session run."""
        return _ScopedIterator(self, inputs, callbacks, tags=self.tags,
                               include_run_info=include_run_info)

    def _new_scope(self) -> SessionScope:
        """The run's session scope; a ReAct agent's calls are held to the ReAct grammar."""
        scope = SessionScope()
        react = is_react_agent(self.agent)
        if react and self.tools:
            scope.grammar = react_grammar([t.name for t in self.tools])
        scope.hook_factory = partial_execution_for(self.tools,
                                                   "react" if react else "json_toolcall")
        self._last_scope = scope
        return scope

    # --- the repeat guard: a run stuck on one call ends ------------------------------------------
    def _iter_next_step(self, name_to_tool_map, color_mapping, inputs, intermediate_steps,
                        run_manager: Any = None) -> Iterator[Any]:
        finish = self._repeat_finish(intermediate_steps)
        if finish is not None:
            yield finish
            return
        yield from super()._iter_next_step(name_to_tool_map, color_mapping, inputs,
                                           intermediate_steps, run_manager)

    async def _aiter_next_step(self, name_to_tool_map, color_mapping, inputs,
                               intermediate_steps, run_manager: Any = None
                               ) -> AsyncIterator[Any]:
        finish = self._repeat_finish(intermediate_steps)
        if finish is not None:
            yield finish
            return
        async for step in super()._aiter_next_step(name_to_tool_map, color_mapping, inputs,
                                                   intermediate_steps, run_manager):
            yield step

    def _repeat_finish(self, intermediate_steps: list[tuple[AgentAction, Any]]
                       ) -> AgentFinish | None:
        """The run's end when its last ``max_repeats`` steps made one identical call."""
        call = repeated_call([[(a.tool, a.tool_input)] for a, _ in intermediate_steps],
                             self.max_repeats)
        if call is None or self.max_repeats is None:
            return None
        message = repeat_message(call, self.max_repeats)
        return AgentFinish(return_values={"output": message}, log=message)

    # --- tools: tell the engine what the paused request waits for --------------------------------
    def _perform_agent_action(self, name_to_tool_map, color_mapping, agent_action: AgentAction,
                              run_manager: Any = None) -> AgentStep:
        _annotate(agent_action)
        args = (name_to_tool_map, color_mapping, agent_action, run_manager)
        try:
            if self.tool_timeout is None:
                return _outside_run(super()._perform_agent_action, *args)
            return self._run_with_timeout(super()._perform_agent_action, args, agent_action)
        except Exception as exc:
            step = self._error_step(name_to_tool_map, agent_action, exc)
            if step is None:
                raise
            return step

    async def _aperform_agent_action(self, name_to_tool_map, color_mapping,
                                     agent_action: AgentAction, run_manager: Any = None
                                     ) -> AgentStep:
        _annotate(agent_action)
        with agent_run():  # NOTE: the tool's own model calls are its own (see _outside_run)
            run = asyncio.ensure_future(super()._aperform_agent_action(
                name_to_tool_map, color_mapping, agent_action, run_manager))
            try:
                done, _ = await asyncio.wait({run}, timeout=self.tool_timeout)
                if not done:
                    return _timeout_step(agent_action, self.tool_timeout)
                return run.result()
            except Exception as exc:
                step = self._error_step(name_to_tool_map, agent_action, exc)
                if step is None:
                    raise
                return step
            finally:
                run.cancel()  # NOTE: timed out, or the run was cancelled: so is the tool

    def _error_step(self, name_to_tool_map: dict[str, BaseTool], action: AgentAction,
                    exc: Exception) -> AgentStep | None:
        """``exc`` as an observation under the Executor's ``handle_tool_error``; None = re-raise
        (also when the tool has a flag of its own: LangChain has already applied it)."""
        tool = name_to_tool_map.get(action.tool)
        if not self.handle_tool_error or (tool is not None and tool.handle_tool_error):
            return None
        return AgentStep(action=action,
                         observation=_tool_error_content(exc, self.handle_tool_error))

    def _run_with_timeout(self, run: Any, args: tuple, action: AgentAction) -> AgentStep:
        pool = ThreadPoolExecutor(1, thread_name_prefix="agentrt-tool")
        future = pool.submit(contextvars.copy_context().run, _outside_run, run, *args)
        pool.shutdown(wait=False)  # NOTE: a timed-out tool thread finishes in the background
        done, _ = wait([future], timeout=self.tool_timeout)
        if not done:
            return _timeout_step(action, self.tool_timeout)
        return future.result()  # NOTE: re-raises the tool's own exception, TimeoutError included


class _ScopedIterator(AgentExecutorIterator):
    """``AgentExecutor.iter``'s iterator whose steps run as one session run."""

    def __iter__(self) -> Iterator[Any]:
        return _scoped(self.agent_executor._new_scope, super().__iter__())

    def __aiter__(self) -> AsyncIterator[Any]:
        return _ascoped(self.agent_executor._new_scope, super().__aiter__())


def _scoped(new_scope: Callable[[], SessionScope], chunks: Iterator[Any]) -> Iterator[Any]:
    """``chunks``, produced inside one agent run. The run's scope lives in a context of its
    own: the caller's code between two chunks (its own model calls) is not part of the run."""
    context = contextvars.copy_context()
    inner = _in_run(new_scope, chunks)
    try:
        while True:
            try:
                chunk = context.run(next, inner)
            except StopIteration:
                return
            yield chunk
    finally:
        context.run(inner.close)


def _in_run(new_scope: Callable[[], SessionScope], chunks: Iterator[Any]) -> Iterator[Any]:
    with agent_run(new_scope()):
        yield from chunks


async def _ascoped(new_scope: Callable[[], SessionScope],
                   chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Async twin of :func:`_scoped`: each step of ``chunks`` runs as a task in the run's
    context (cancelling the caller cancels it)."""
    context = contextvars.copy_context()
    inner = _ain_run(new_scope, chunks)
    try:
        while True:
            try:
                chunk = await asyncio.create_task(_anext(inner), context=context)
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        await asyncio.create_task(_aclose(inner), context=context)


async def _anext(chunks: AsyncIterator[Any]) -> Any:
    return await anext(chunks)  # NOTE: a coroutine, which create_task takes on every Python


async def _aclose(chunks: Any) -> None:
    await chunks.aclose()


async def _ain_run(new_scope: Callable[[], SessionScope],
                   chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
    with agent_run(new_scope()):
        async for chunk in chunks:
            yield chunk


def _outside_run(run: Callable[..., AgentStep], *args: Any) -> AgentStep:
    """Run a tool: a model call the tool makes itself is its own, not a step of the agent's
    run (no ReAct grammar, no partial execution, not in the agent's session)."""
    with agent_run():
        return run(*args)


def _timeout_step(action: AgentAction, seconds: float) -> AgentStep:
    return AgentStep(action=action, observation=f"Error: the tool took longer than {seconds}s")


def _tool_error_content(exc: Exception, flag: ToolErrorHandler) -> str:
    """LangChain's reading of ``handle_tool_error`` (``langchain_core.tools``), for ``exc``."""
    if isinstance(flag, bool):
        return exc.args[0] if exc.args else "Tool execution error"
    if isinstance(flag, str):
        return flag
    return flag(exc)


def _annotate(action: AgentAction) -> None:
    """The session that produced ``action`` is paused for this tool: say which."""
    scope = current_scope()
    if scope is not None:
        scope.annotate_last(action.tool)
