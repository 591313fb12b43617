"""SGLang's native wire format (SGLang 0.5.8, ``managers/io_struct.py``): the subset served.

Requests keep SGLang's names and defaults — ``max_new_tokens`` 128, ``temperature`` 1.0,
``top_k`` -1 (off) — and ignore fields they do not know (sglang-router adds its own). Values
agentrt cannot honour get a 400 naming the field: batches (a list of texts or of id lists),
logprobs, hidden states, LoRA, images, penalties, ``n`` > 1, more than one grammar, a
``sampling_seed`` outside the signed 64-bit range, more stop strings than
:mod:`agentrt.server.limits` allows, text that is not valid Unicode. A grammar (``ebnf``,
``structural_tag``, ``json_schema`` or ``regex``) becomes :attr:`SamplingParams.grammar`.
One prompt per ``/generate``, as ``text`` or ``input_ids``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentrt.core.sampling_params import Grammar, SamplingParams, check_seed
from agentrt.server.limits import check_stop, check_text

__all__ = ["AbortRequest", "CloseSessionRequest", "GenerateRequest", "NativeSamplingParams",
           "OpenSessionRequest", "SessionParams"]

_NEUTRAL: dict[str, Any] = {
    "n": 1, "min_p": 0.0, "min_new_tokens": 0, "frequency_penalty": 0.0,
    "presence_penalty": 0.0, "repetition_penalty": 1.0, "stop_regex": None, "logit_bias": None,
    "custom_params": None,
    # GenerateRequest
    "return_logprob": None, "return_hidden_states": False, "return_routed_experts": False,
    "lora_path": None, "input_embeds": None, "image_data": None, "video_data": None,
    "audio_data": None, "custom_logit_processor": None, "top_logprobs_num": None,
    "token_ids_logprob": None,
}
"""Fields agentrt accepts only at their neutral value (or None / False)."""


def _check_neutral(name: str, value: Any) -> Any:
    if value in (None, False, _NEUTRAL[name]):
        return value
    raise ValueError(f"{name}={value!r} is not supported by agentrt; leave it out")


class NativeSamplingParams(BaseModel):
    """SGLang's ``sampling_params``."""

    model_config = ConfigDict(extra="ignore")

    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    """-1 (or 0) = off."""
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    """Keep the matched stop string at the end of ``text``."""
    sampling_seed: int | None = None
    """Seed of the sampler: a signed 64-bit integer (400 otherwise)."""
    n: int = 1
    min_p: float = 0.0
    min_new_tokens: int = 0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    stop_regex: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None
    custom_params: dict[str, Any] | None = None

    @field_validator("n", "min_p", "min_new_tokens", "frequency_penalty", "presence_penalty",
                     "repetition_penalty", "stop_regex", "logit_bias", "custom_params")
    @classmethod
    def _supported(cls, value: Any, info: Any) -> Any:
        return _check_neutral(info.field_name, value)

    @field_validator("sampling_seed")
    @classmethod
    def _seed_in_range(cls, value: int | None) -> int | None:
        check_seed(value, "sampling_seed")
        return value

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_stop(value, "sampling_params.stop")

    def to_params(self) -> SamplingParams:
        """The engine's parameters (``ValueError`` for values it rejects)."""
        stop = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return SamplingParams(max_tokens=self.max_new_tokens, temperature=self.temperature,
                              top_p=self.top_p, top_k=max(self.top_k, 0),
                              seed=self.sampling_seed, stop=tuple(s for s in stop if s),
                              stop_token_ids=tuple(self.stop_token_ids or ()),
                              ignore_eos=self.ignore_eos,
                              skip_special_tokens=self.skip_special_tokens,
                              grammar=self._grammar())

    def _grammar(self) -> Grammar | None:
        given = [k for k in ("ebnf", "structural_tag", "json_schema", "regex") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"set at most one grammar, got {', '.join(given)}")
        return Grammar(given[0], getattr(self, given[0])) if given else None


class SessionParams(BaseModel):
    """Which session a request belongs to and which of its requests it continues."""

    model_config = ConfigDict(extra="ignore")

    id: str
    rid: str | None = None
    """The session's request to continue (None: start from scratch)."""
    offset: int | None = None
    """Keep only that request's context up to here (Python slice end) before appending."""
    replace: bool | None = None
    """Drop the requests that continued ``rid`` before (branch again from it)."""
    drop_previous_output: bool | None = None
    """Continue ``rid``'s prompt, without what it generated."""


class GenerateRequest(BaseModel):
    """``POST /generate``."""

    model_config = ConfigDict(extra="ignore")

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: NativeSamplingParams | None = None
    stream: bool = False
    rid: str | None = None
    session_params: SessionParams | None = None
    extra_key: str | None = None
    """SGLang's cache key: requests share cached prefixes only with the same key (agentrt's
    ``RequestOptions.namespace``)."""
    return_logprob: bool | None = None
    top_logprobs_num: int | None = None
    token_ids_logprob: list[int] | None = None
    return_hidden_states: bool = False
    return_routed_experts: bool = False
    lora_path: str | None = None
    input_embeds: Any = None
    image_data: Any = None
    video_data: Any = None
    audio_data: Any = None
    custom_logit_processor: str | None = None

    @field_validator("return_logprob", "return_hidden_states", "return_routed_experts",
                     "lora_path", "input_embeds", "image_data", "video_data", "audio_data",
                     "custom_logit_processor", "top_logprobs_num", "token_ids_logprob")
    @classmethod
    def _supported(cls, value: Any, info: Any) -> Any:
        return _check_neutral(info.field_name, value)

    @field_validator("*", mode="before")
    @classmethod
    def _valid_text(cls, value: Any, info: Any) -> Any:
        return check_text(value, info.field_name)

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("Either text or input_ids should be provided.")
        if isinstance(self.text, list) or (self.input_ids and isinstance(self.input_ids[0],
                                                                          list)):
            raise ValueError("agentrt serves one prompt per /generate, not a batch")
        if self.input_ids is not None and not self.input_ids:
            raise ValueError("input_ids cannot be empty.")
        return self

    @property
    def params(self) -> NativeSamplingParams:
        return self.sampling_params or NativeSamplingParams()


class OpenSessionRequest(BaseModel):
    """``POST /open_session``: answered with the session id (a JSON string)."""

    model_config = ConfigDict(extra="ignore")

    capacity_of_str_len: int
    session_id: str | None = None


class CloseSessionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    session_id: str


class AbortRequest(BaseModel):
    """``POST /abort_request``: one request by ``rid``, or every native one."""

    model_config = ConfigDict(extra="ignore")

    rid: str = ""
    abort_all: bool = False
