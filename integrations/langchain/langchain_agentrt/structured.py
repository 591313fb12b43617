"""``with_structured_output``: grammar-constrained JSON, or one forced tool call.

``method="json_schema"`` constrains the answer to JSON matching the schema (and shows the
schema to the model); ``"json_mode"`` to any JSON object. ``"function_calling"`` binds the
schema as the one tool the answer must call (:meth:`ChatAgentRT.bind_tools`). The answer is
parsed into the pydantic model (v1 or v2) or returned as a dict, as LangChain's parsers do,
except that an answer cut off (by ``max_tokens`` or a stop string) is a parsing error: their
JSON parsers would close it and answer with what was written, their tool parsers with None.
"""

from __future__ import annotations

import json
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.json import parse_json_markdown
from langchain_core.utils.pydantic import is_basemodel_subclass

if TYPE_CHECKING:
    from langchain_core.outputs import Generation

    from langchain_agentrt.chat_models import ChatAgentRT

__all__ = ["structured_output"]


def structured_output(llm: ChatAgentRT, schema: dict[str, Any] | type | None, method: str, *,
                      include_raw: bool = False) -> Runnable:
    """``llm`` bound to a JSON response format or to ``schema`` as its one tool, piped into a
    parser for ``schema``."""
    if schema is None and method != "json_mode":
        raise ValueError(f"schema=None needs method='json_mode' (any JSON object); "
                         f"method={method!r} needs a schema")
    if method == "function_calling":
        bound, parser = _function_calling(llm, schema)
    elif method in ("json_schema", "json_mode"):
        bound, parser = _response_format(llm, schema, method)
    else:
        raise ValueError(f"method must be 'function_calling', 'json_schema' or 'json_mode', "
                         f"got {method!r}")
    if not include_raw:
        return bound | parser
    parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser,
                                        parsing_error=lambda _: None)
    fallback = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=bound) | parsed.with_fallbacks([fallback],
                                                          exception_key="parsing_error")


def _response_format(llm: ChatAgentRT, schema: dict[str, Any] | type | None,
                     method: str) -> tuple[Runnable, Runnable]:
    response_format: dict[str, Any] = {"type": "json_object"}
    if method == "json_schema":
        json_schema = convert_to_json_schema(schema)
        name = json_schema.get("title", "response")
        response_format = {"type": "json_schema",
                           "json_schema": {"name": name, "schema": json_schema, "strict": True}}
    bound = llm.bind(response_format=response_format, ls_structured_output_format={
        "kwargs": {"method": method}, "schema": schema})
    if isinstance(schema, type) and is_basemodel_subclass(schema):
        return bound, _PydanticJsonParser(pydantic_object=schema)
    return bound, _JsonParser()


def _function_calling(llm: ChatAgentRT, schema: dict[str, Any] | type
                      ) -> tuple[Runnable, Runnable]:
    bound = llm.bind_tools([schema], tool_choice="any", ls_structured_output_format={
        "kwargs": {"method": "function_calling"}, "schema": schema})
    if isinstance(schema, type) and is_basemodel_subclass(schema):
        return bound, _PydanticCallParser(tools=[schema], first_tool_only=True)
    name = convert_to_openai_tool(schema)["function"]["name"]
    return bound, _KeyCallParser(key_name=name, first_tool_only=True)


class _CallParsed:
    """A tools parser whose whole (not partial) answer must hold a call that parsed."""

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> Any:
        message = getattr(result[0], "message", None) if result else None
        if (not partial and isinstance(message, AIMessage) and message.invalid_tool_calls
                and not message.tool_calls):
            error = message.invalid_tool_calls[0].get("error")
            raise OutputParserException(f"the structured output's tool call did not parse: "
                                        f"{error}", llm_output=str(message.content))
        return super().parse_result(result, partial=partial)  # type: ignore[misc]


class _PydanticCallParser(_CallParsed, PydanticToolsParser):
    pass


class _KeyCallParser(_CallParsed, JsonOutputKeyToolsParser):
    pass


class _WholeJson:
    """A JSON parser whose whole (not partial) answer must be complete JSON."""

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> Any:
        if not partial:
            text = result[0].text
            try:
                parse_json_markdown(text, parser=json.loads)
            except json.JSONDecodeError as exc:
                raise OutputParserException(f"the structured output is not complete JSON "
                                            f"({exc}): {text!r}", llm_output=text) from None
        return super().parse_result(result, partial=partial)  # type: ignore[misc]


class _JsonParser(_WholeJson, JsonOutputParser):
    pass


class _PydanticJsonParser(_WholeJson, PydanticOutputParser):
    pass
