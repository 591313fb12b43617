"""A tiny Mistral-style tokenizer for tests — one token per byte, Mistral's control tokens as
special added tokens (``[TOOL_CALLS]`` among them), the chat template given — and a backend
that streams scripted outputs in it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from agentrt.backends import Backend, BackendCapabilities
from agentrt.core.detokenizer import IncrementalDetokenizer
from agentrt.core.model_info import ModelInfo
from agentrt.core.outputs import StreamDelta

TEMPLATES = Path(__file__).parent / "templates"
MISTRAL_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]",
                    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                    "[/TOOL_RESULTS]")


def mistral_tokenizer(template: str = "mistral-v0.3.jinja",
                      merges: tuple[tuple[str, str], ...] = (),
                      specials: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with Mistral's special tokens (and ``specials``, e.g. v11's
    ``[ARGS]``) and ``templates/<template>``; ``merges`` (ASCII pairs, e.g. ``("}", "]")``)
    add multi-character tokens."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    pieces = [*MISTRAL_SPECIALS, *specials, *sorted(alphabet), *(a + b for a, b in merges)]
    vocab = {tok: i for i, tok in enumerate(pieces)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([*MISTRAL_SPECIALS, *specials])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        chat_template=(TEMPLATES / template).read_text())


class ScriptedBackend(Backend):
    """Streams scripted outputs one token a delta, decoded as the engine would (special tokens
    skipped unless the params keep them); no pause in place, so a call's hook runs on the
    streamed tokens."""

    name = "scripted"

    def __init__(self, tokenizer, outputs: Sequence[str]) -> None:
        self._tokenizer, self.outputs = tokenizer, list(outputs)
        self.prompts: list[list[int]] = []

    @property
    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(can_pause_in_place=False, keeps_kv_across_calls=False,
                                   kv_held_between_calls=False, prefix_cache=False)

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def model_info(self) -> ModelInfo:
        return ModelInfo(name="tiny-mistral", path="", architecture="MistralForCausalLM",
                         max_model_len=4096, vocab_size=len(self._tokenizer),
                         eos_token_ids=(self._tokenizer.eos_token_id,))

    def stream(self, prompt_ids, params=None, *, session_id=None, keep=None,
               options=None) -> Iterator[StreamDelta]:
        self.prompts.append(list(prompt_ids))
        ids = self._tokenizer.encode(self.outputs.pop(0), add_special_tokens=False)
        skip = params is None or params.skip_special_tokens
        detok = IncrementalDetokenizer(self._tokenizer, skip_special_tokens=skip)
        for n, i in enumerate(ids, 1):
            last = n == len(ids)
            yield StreamDelta("r", detok.push([i]), [i], last, "stop" if last else None,
                              len(prompt_ids))

    async def astream(self, *args, **kwargs):  # pragma: no cover - sync only here
        raise NotImplementedError

    def open_session(self) -> str:
        return "s"

    async def aopen_session(self) -> str:  # pragma: no cover
        return "s"

    def close_session(self, session_id: str) -> None:
        pass

    async def aclose_session(self, session_id: str) -> None:  # pragma: no cover
        pass

    def abort(self, request_id: str) -> None:  # pragma: no cover
        pass

    async def aabort(self, request_id: str) -> None:  # pragma: no cover
        pass
