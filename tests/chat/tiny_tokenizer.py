"""A tiny Mistral-style tokenizer for tests: one token per byte, Mistral's control tokens as
special added tokens (``[TOOL_CALLS]`` among them), and the chat template given."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

TEMPLATES = Path(__file__).parent / "templates"
MISTRAL_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]",
                    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                    "[/TOOL_RESULTS]")


def mistral_tokenizer(template: str = "mistral-v0.3.jinja") -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with Mistral's special tokens and ``templates/<template>``."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate([*MISTRAL_SPECIALS, *sorted(alphabet)])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(MISTRAL_SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        chat_template=(TEMPLATES / template).read_text())
