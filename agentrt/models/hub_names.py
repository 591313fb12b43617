"""Names of Hugging Face hub models, shared by the offline cache lookup (:mod:`.sources`) and
``agentrt pull`` (:mod:`.pull`).

A hub name is ``org/name`` (``org/`` optional for old ids such as ``gpt2``), then
``@REVISION`` (a branch, tag or commit hash), then ``:PICK``: a GGUF file of the repository by
its name, or by a quantization named in it (``Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m``).
llama.cpp's ``gguf-split`` parts (``NAME-00001-of-00003.gguf``) are no whole model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

__all__ = ["HUB_ID", "SPLIT", "HubName", "is_revision", "parse_hub_name", "pick_gguf",
           "split_part"]

#: org/name (org/ optional), then @REVISION, then :PICK
HUB_ID = re.compile(r"((?:[A-Za-z0-9][\w.-]*/)?[\w.-]+)(?:@([^:]*))?(?::([\w.-]+))?")
#: llama.cpp's gguf-split parts
SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
_REVISION = re.compile(r"[\w.-]+(?:/[\w.-]+)*")  # refs/pr/1 too; '.' / '..' parts refused


class HubName(NamedTuple):
    """``org/name[@REVISION][:PICK]`` split into its parts."""

    repo_id: str
    revision: str | None
    pick: str | None


def parse_hub_name(spec: str) -> HubName:
    """Split a hub name, or raise ``ValueError`` saying which form it takes."""
    match = HUB_ID.fullmatch(spec)
    if match is None or spec.startswith("ollama:"):
        raise ValueError(f"{spec[:200]!r} is not a Hugging Face hub name "
                         "(org/name[@REVISION][:QUANT or FILE.gguf])")
    name = HubName(match[1], match[2], match[3])
    if name.revision is not None and not is_revision(name.revision):
        raise ValueError(f"{name.revision!r} is not a revision (a branch, tag or commit hash, "
                         "as in org/name@v1.0)")
    return name


def is_revision(revision: str) -> bool:
    """A branch, tag or commit hash as the hub names them (no '.' or '..' path parts)."""
    return _REVISION.fullmatch(revision) is not None and not \
        {".", ".."} & set(revision.split("/"))


def pick_gguf(files: list[str], pick: str | None) -> str | None:
    """The one file ``pick`` names: by its whole name, else by a whole part of it (``Q6_K``
    is ``x-Q6_K.gguf``, not ``x-Q6_K_L.gguf``), else by any part (case-insensitive)."""
    if pick is None:
        return files[0] if len(files) == 1 else None
    part = re.compile(rf"(?:^|[-.]){re.escape(pick)}(?:[-.]|$)", re.IGNORECASE)
    exact = [f for f in files if f in (pick, f"{pick}.gguf")]
    whole = [f for f in files if part.search(f.removesuffix(".gguf"))]
    loose = [f for f in files if pick.lower() in f.lower()]
    candidates = exact or whole or loose
    return candidates[0] if len(candidates) == 1 else None


def split_part(path: Path) -> str | None:
    """Why ``path`` is no whole model when it is one part of a split GGUF (llama.cpp's
    gguf-split writes ``NAME-00001-of-00003.gguf`` …), else None."""
    match = SPLIT.search(path.name)
    if match is None or int(match[2]) < 2:
        return None
    first = path.with_name(SPLIT.sub(f"-00001-of-{match[2]}.gguf", path.name))
    merged = SPLIT.sub(".gguf", path.name)
    return (f"{path.name} is part {int(match[1])} of {int(match[2])} of a split GGUF, and "
            "agentrt reads a model from one file: merge the parts with `llama-gguf-split "
            f"--merge {first} {merged}` and pass the merged file")
