"""``with_structured_output`` through a response format: grammar-constrained JSON.

``method="json_schema"`` constrains the answer to JSON matching the schema (and shows the
schema to the model); ``"json_mode"`` to any JSON object. The answer is parsed into the
pydantic model (v1 or v2) or returned as a dict. ``"function_calling"`` is LangChain's own
implementation on top of :meth:`ChatAgentRT.bind_tools`.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema
from langchain_core.utils.pydantic import is_basemodel_subclass

if TYPE_CHECKING:
    from langchain_agentrt.chat_models import ChatAgentRT

__all__ = ["structured_output"]


def structured_output(llm: ChatAgentRT, schema: dict[str, Any] | type, method: str, *,
                      include_raw: bool = False) -> Runnable:
    """``llm`` bound to a JSON response format, piped into a parser for ``schema``."""
    if method not in ("json_schema", "json_mode"):
        raise ValueError(f"method must be 'function_calling', 'json_schema' or 'json_mode', "
                         f"got {method!r}")
    json_schema = convert_to_json_schema(schema)
    response_format: dict[str, Any] = {"type": "json_object"}
    if method == "json_schema":
        name = json_schema.get("title", "response")
        response_format = {"type": "json_schema",
                           "json_schema": {"name": name, "schema": json_schema, "strict": True}}
    bound = llm.bind(response_format=response_format, ls_structured_output_format={
        "kwargs": {"method": method}, "schema": schema})
    parser: Runnable
    if isinstance(schema, type) and is_basemodel_subclass(schema):
        parser = PydanticOutputParser(pydantic_object=schema)
    else:
        parser = JsonOutputParser()
    if not include_raw:
        return bound | parser
    parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser,
                                        parsing_error=lambda _: None)
    fallback = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=bound) | parsed.with_fallbacks([fallback],
                                                          exception_key="parsing_error")
