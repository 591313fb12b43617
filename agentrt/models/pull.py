"""``agentrt pull``: download a model from the Hugging Face hub, on request only.

What it downloads: ``org/name:QUANT`` (or ``:FILE.gguf``) one GGUF file of a GGUF repository,
picked as :func:`~agentrt.models.sources.locate` picks it; ``org/name`` a repository's
safetensors model folder (config, tokenizer, weights), or its one GGUF file. ``@REVISION``
pins a branch, tag or commit. Where it goes: the standard Hugging Face cache
(``$HF_HUB_CACHE``), laid out as huggingface_hub lays it out, so ``agentrt models``, ``--model``
and every Hugging Face tool find it offline afterwards.

Each file is fetched into ``blobs/<etag>.agentrt-partial`` with a progress bar and moved into
place only once whole and verified: its size, and its checksum against the hub's etag (the
sha256 of an LFS file, the git blob hash of a small one). An interrupted transfer keeps the
partial file, and the same command resumes it with an HTTP ``Range`` request
(huggingface_hub's own downloader starts a broken file over). ``$HF_ENDPOINT`` names another
hub (a mirror); ``$HF_HUB_OFFLINE`` refuses. ``ollama:`` names stay read-only: Ollama's store
belongs to ``ollama pull``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from agentrt import env
from agentrt.models.hub_names import SPLIT, HubName, parse_hub_name, pick_gguf

__all__ = ["PullError", "PulledModel", "ensure_model", "pull"]

#: the files of a safetensors model folder that agentrt reads
_FOLDER_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "tokenizer.model", "special_tokens_map.json", "vocab.json", "merges.txt",
                 "added_tokens.json", "chat_template.json", "chat_template.jinja",
                 "*.safetensors", "model.safetensors.index.json")
_CHUNK = 1 << 20


class PullError(OSError):
    """A model could not be downloaded: the hub unreachable or refusing, no file that matches,
    a transfer cut off (run again to resume) or a file that fails its checksum."""


@dataclass(frozen=True)
class PulledModel:
    """What :func:`pull` left in the Hugging Face cache."""

    #: what to pass as ``model=`` / ``--model`` to run it
    name: str
    #: the ``.gguf`` file or the model folder, in the cache's snapshot
    path: Path
    #: the repository files it holds, relative to the snapshot
    files: tuple[str, ...]
    #: bytes transferred by this call (0: everything was already there)
    downloaded_bytes: int


def pull(name: str, *, progress: bool = True, token: str | bool | None = None) -> PulledModel:
    """Download ``name`` (``org/name[@REVISION][:QUANT]``) into the Hugging Face cache.

    Files already in the cache are not fetched again; a partial file left by an interrupted
    call is resumed. Progress bars go to stderr (``progress=False``: none).

    Raises:
        ValueError: ``name`` is no hub name (an ``ollama:`` name, a path).
        PullError: the hub is unreachable, offline mode is on, the repository or revision does
            not exist, nothing in it matches, the transfer broke, or a checksum failed.
    """
    if name.startswith("ollama:"):
        raise ValueError(f"{name!r}: agentrt reads Ollama's store but never writes it; run "
                         f"`ollama pull {name.removeprefix('ollama:')}`, then pass {name!r}")
    hub = parse_hub_name(name)
    if env.hf_offline():
        raise PullError("HF_HUB_OFFLINE is set, so nothing can be downloaded; unset it to pull "
                        f"{name!r} (models already in the cache run offline)")
    endpoint = env.hf_endpoint()
    files = _choose(_repo_files(hub, endpoint, token), hub)
    got = sum(_fetch_file(hub, f, endpoint, token, progress) for f in files)
    from agentrt.models.sources import locate

    path, _ = locate(name)
    return PulledModel(name, path, tuple(files), got)


def ensure_model(name: str | None, *, progress: bool = True) -> None:
    """Pull ``name`` unless :func:`~agentrt.models.sources.locate` already finds it here (the
    ``download=True`` of :class:`~agentrt.Engine` and ``--pull`` of the command line)."""
    from agentrt.models.sources import ModelNotFoundError, locate

    try:
        locate(name)
    except ModelNotFoundError:
        if name is None:
            raise
        pull(name, progress=progress)


# --- the repository's files -------------------------------------------------------------------


def _repo_files(hub: HubName, endpoint: str, token: str | bool | None) -> list[str]:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(hub.repo_id,
                                                                revision=hub.revision)
    except RevisionNotFoundError:
        raise PullError(f"{hub.repo_id} has no revision {hub.revision!r} on {endpoint}") from None
    except RepositoryNotFoundError:
        raise PullError(f"no repository {hub.repo_id!r} on {endpoint} (or it is private or "
                        "gated: log in with `hf auth login` or set HF_TOKEN)") from None
    except Exception as exc:  # the hub's HTTP client: no network, refused, timed out, 5xx
        raise _unreachable(endpoint, exc) from None
    return sorted(s.rfilename for s in info.siblings or [])


def _choose(files: list[str], hub: HubName) -> list[str]:
    """The files to download: one GGUF, or a safetensors folder's files."""
    ggufs = [f for f in files if f.endswith(".gguf") and "/" not in f]
    named = hub.repo_id if hub.revision is None else f"{hub.repo_id}@{hub.revision}"
    choices = ", ".join(f"{named}:{f.removesuffix('.gguf')}" for f in ggufs if
                        not SPLIT.search(f) or "-00001-of-" in f)
    if hub.pick is not None:
        whole = [f for f in ggufs if not SPLIT.search(f)]
        chosen = pick_gguf(whole, hub.pick)
        if chosen is not None:
            return [chosen]
        if pick_gguf([f for f in ggufs if SPLIT.search(f)], hub.pick) or any(
                hub.pick.lower() in f.lower() for f in ggufs if SPLIT.search(f)):
            raise PullError(f"{named}:{hub.pick} is a split GGUF, and agentrt reads a model from "
                            "one file: download its parts with `hf download` and merge them "
                            "with `llama-gguf-split --merge`")
        raise PullError(f"no single .gguf of {named} matches {hub.pick!r}; "
                        f"its GGUF files: {choices or 'none'}")
    if "config.json" in files and any(f.endswith(".safetensors") for f in files):
        return [f for f in files if any(fnmatch.fnmatch(f, p) for p in _FOLDER_FILES)]
    if len(ggufs) == 1:
        return ggufs
    if ggufs:
        raise PullError(f"{named} holds {len(ggufs)} GGUF files: name one, e.g. "
                        f"`agentrt pull {named}:Q4_K_M`; choices: {choices}")
    raise PullError(f"{named} has neither a safetensors model (config.json + *.safetensors) "
                    "nor a .gguf file")


# --- one file: resumable, verified ------------------------------------------------------------


def _fetch_file(hub: HubName, filename: str, endpoint: str, token: str | bool | None,
                progress: bool) -> int:
    """Put ``filename`` into the cache; the bytes transferred."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    cache = env.hf_hub_cache()
    url = hf_hub_url(hub.repo_id, filename, revision=hub.revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except Exception as exc:
        raise _unreachable(endpoint, exc) from None
    if not meta.etag or meta.size is None:
        raise PullError(f"{endpoint} sent no etag or size for {filename}: not a Hugging Face "
                        "hub (check HF_ENDPOINT)")
    blob = cache / f"models--{hub.repo_id.replace('/', '--')}" / "blobs" / meta.etag
    got = 0
    if not blob.is_file():
        blob.parent.mkdir(parents=True, exist_ok=True)
        partial = blob.with_name(f"{meta.etag}.agentrt-partial")
        got = _download(meta.location, partial, filename, meta.size, token, progress)
        _verify(partial, filename, meta.etag, meta.size)
        os.replace(partial, blob)
    try:  # links the blob into snapshots/<commit>/ and records the revision's ref
        hf_hub_download(hub.repo_id, filename, revision=hub.revision, cache_dir=cache,
                        endpoint=endpoint, token=token)
    except Exception as exc:
        raise _unreachable(endpoint, exc) from None
    return got


def _download(url: str, partial: Path, filename: str, size: int, token: str | bool | None,
              progress: bool) -> int:
    """Append the rest of the file to ``partial`` (a Range request from what it holds)."""
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session
    from tqdm.auto import tqdm

    have = partial.stat().st_size if partial.is_file() else 0
    if have > size:
        partial.unlink()
        have = 0
    if have == size:
        return 0
    headers = build_hf_headers(token=token)
    headers["Accept-Encoding"] = "identity"
    if have:
        headers["Range"] = f"bytes={have}-"
    written = 0
    try:
        with get_session().stream("GET", url, headers=headers, follow_redirects=True,
                                  timeout=30) as response:
            if response.status_code >= 400:
                raise PullError(f"{url} answered {response.status_code} for {filename}")
            if have and response.status_code != 206:  # the server ignored the Range: start over
                have = 0
            with partial.open("ab" if have else "wb") as out, tqdm(
                    total=size, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                    desc=filename, disable=not progress) as bar:
                for chunk in response.iter_bytes():  # as it arrives: a cut keeps it all
                    out.write(chunk)
                    written += len(chunk)
                    bar.update(len(chunk))
    except httpx2.HTTPError as exc:
        done = have + written
        raise PullError(f"the download of {filename} stopped at {done:,} of {size:,} bytes "
                        f"({type(exc).__name__}: {exc}); run the same command again to resume "
                        "it") from None
    if have + written < size:
        raise PullError(f"the download of {filename} stopped at {have + written:,} of {size:,} "
                        "bytes (the server closed the connection); run the same command again "
                        "to resume it")
    return written


def _verify(partial: Path, filename: str, etag: str, size: int) -> None:
    """Size, then the hub's checksum: sha256 (LFS files) or the git blob sha1 (small files).
    A file that fails is deleted, so the next call downloads it whole."""
    actual = partial.stat().st_size
    expected = digest = None
    if actual == size and len(etag) in (40, 64) and all(c in "0123456789abcdef" for c in etag):
        h = hashlib.sha256() if len(etag) == 64 else hashlib.sha1(b"blob %d\0" % size)
        with partial.open("rb") as f:
            while block := f.read(_CHUNK):
                h.update(block)
        expected, digest = etag, h.hexdigest()
    if actual != size or digest != expected:
        partial.unlink()
        what = f"size {actual:,}, expected {size:,}" if actual != size else \
            f"{'sha256' if len(etag) == 64 else 'git blob sha1'} {digest}, expected {expected}"
        raise PullError(f"{filename} arrived corrupted ({what}); it was deleted: run the same "
                        "command again to download it anew")


def _unreachable(endpoint: str, exc: Exception) -> PullError:
    return PullError(f"could not download from {endpoint} ({type(exc).__name__}: "
                     f"{str(exc)[:300]}); check the network, or HF_ENDPOINT for a mirror. "
                     "Models already in the cache run offline.")
