"""Request fields agentrt accepts only at their neutral value, so none is silently ignored.

OpenAI's clients pass extra fields through (``extra_body``), and the servers people point
them at honour many: vLLM's and SGLang's sampling extras (``repetition_penalty``,
``min_p``, ``guided_json``, ...), OpenAI's deprecated ``functions``, audio output.
Ignored, each would give an answer other than the one asked for — no penalty, no
constraint, no function call — with a 200. So each is declared here and refused with a 400
naming it (``repetition_penalty=1.3 is not supported by agentrt; ...``) unless it asks for
nothing: absent, null, empty, or its neutral value (``repetition_penalty=1.0``). Fields that
cannot change the answer (``user``, ``store``, ``metadata``, ``prediction``, ...) are still
ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["ChatExtras", "EngineExtras", "NEUTRAL", "check_neutral"]

NEUTRAL: dict[str, Any] = {
    # OpenAI's own fields agentrt cannot honour
    "best_of": 1, "logprobs": False, "top_logprobs": 0, "echo": False, "suffix": "",
    "logit_bias": None, "presence_penalty": 0.0, "frequency_penalty": 0.0,
    "functions": None, "function_call": None, "modalities": ["text"], "audio": None,
    "web_search_options": None,
    # vLLM's and SGLang's extras
    "repetition_penalty": 1.0, "min_p": 0.0, "length_penalty": 1.0,
    "use_beam_search": False,
    "skip_special_tokens": True, "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False, "no_stop_trim": False, "prompt_logprobs": None,
    "allowed_token_ids": None, "bad_words": None, "truncate_prompt_tokens": None,
    "return_tokens_as_token_ids": False, "lora_path": None, "guided_json": None,
    "guided_regex": None, "guided_choice": None, "guided_grammar": None,
    "structured_outputs": None, "regex": None, "ebnf": None, "chat_template": None,
    "continue_final_message": False,
    "add_generation_prompt": True, "continuous_usage_stats": False,
}
"""Each field's neutral value; null and an empty object or list are neutral too."""

_HINTS = {
    **dict.fromkeys(("guided_json", "guided_regex", "guided_choice", "guided_grammar",
                     "structured_outputs", "regex", "ebnf"),
                    "constrain the answer with response_format or tools"),
    "functions": "use tools", "function_call": "use tools and tool_choice",
}


def check_neutral(name: str, value: Any) -> Any:
    """``value`` if it asks for nothing (see :data:`NEUTRAL`), else a ``ValueError`` naming
    the field. ``0`` is not ``false`` here: the legacy ``logprobs=0`` asks for logprobs."""
    neutral = NEUTRAL[name]
    same_kind = isinstance(value, bool) is isinstance(neutral, bool)
    if value is None or value in ({}, [], "") or (value == neutral and same_kind):
        return value
    hint = "leave it out" if neutral in (None, False, "") else \
        f"leave it out or use {neutral!r}"
    if name in _HINTS:
        hint = f"{hint} ({_HINTS[name]})"
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    raise ValueError(f"{name}={shown} is not supported by agentrt; {hint}")


class EngineExtras(BaseModel):
    """vLLM's and SGLang's sampling extras both endpoints refuse unless neutral."""

    repetition_penalty: Any = None
    min_p: Any = None
    length_penalty: Any = None
    use_beam_search: Any = None
    skip_special_tokens: Any = None
    spaces_between_special_tokens: Any = None
    include_stop_str_in_output: Any = None
    no_stop_trim: Any = None
    prompt_logprobs: Any = None
    allowed_token_ids: Any = None
    bad_words: Any = None
    truncate_prompt_tokens: Any = None
    return_tokens_as_token_ids: Any = None
    lora_path: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structured_outputs: Any = None
    regex: Any = None
    ebnf: Any = None

    @field_validator("*")
    @classmethod
    def _engine_neutral(cls, value: Any, info: Any) -> Any:
        return check_neutral(info.field_name, value) if info.field_name in _ENGINE else value


class ChatExtras(BaseModel):
    """Chat fields refused unless neutral: OpenAI's ``functions`` and audio, vLLM's template
    controls."""

    model_config = ConfigDict(extra="ignore")

    best_of: Any = None
    echo: Any = None
    functions: Any = None
    function_call: Any = None
    modalities: Any = None
    audio: Any = None
    web_search_options: Any = None
    chat_template: Any = None
    continue_final_message: Any = None
    add_generation_prompt: Any = None

    @field_validator("*")
    @classmethod
    def _chat_neutral(cls, value: Any, info: Any) -> Any:
        return check_neutral(info.field_name, value) if info.field_name in _CHAT else value


_ENGINE = frozenset(EngineExtras.model_fields)
_CHAT = frozenset(ChatExtras.model_fields)
