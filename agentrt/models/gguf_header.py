"""A GGUF file's header, walked with bounds checks, then read.

:func:`read_header` first walks every metadata entry and tensor record inside the file's size,
and requires each tensor to be whole blocks of a type some GGUF reader knows, inside the file
(``gguf.GGUFReader`` trusts the counts it finds: an array length past the end of the file has
it loop for as long as the length says). Only then is the header read, here: the reader parses
each of a tokenizer's ~100,000 strings into numpy arrays (seconds a load), where this module
unpacks a numeric array in one call and a string as bytes, decoded when asked. Each failure is
a ``ValueError`` naming the file and what is wrong.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GGUFHeader", "HeaderField", "HeaderTensor", "read_header", "read_summary"]


@dataclass(frozen=True)
class HeaderField:
    """One metadata entry: its value as stored (strings as bytes) and its GGUF value type."""

    raw: Any
    kind: int
    """GGUF's value type (8: string, 9: array, ...)."""

    def contents(self) -> Any:
        """The value: a str (UTF-8; ``UnicodeDecodeError`` if it is not), a number, a bool,
        or a list of these for an array."""
        return _decoded(self.raw)

    def __len__(self) -> int:
        """Items of an array (1 for a scalar or a string)."""
        return len(self.raw) if self.kind == _ARRAY else 1


@dataclass(frozen=True)
class HeaderTensor:
    """One tensor record: where its bytes are (``data_offset``, absolute) and what they are."""

    path: Path
    name: str
    tensor_type: int
    """GGML's type number (``gguf.GGMLQuantizationType``)."""
    shape: tuple[int, ...]
    """As GGUF lists it, innermost dimension first."""
    data_offset: int
    n_bytes: int

    @property
    def data(self) -> np.ndarray:
        """An F32 tensor's values, read from the file (1-D)."""
        if self.tensor_type != 0:
            raise TypeError(f"tensor {self.name!r} is not F32")
        return np.fromfile(self.path, dtype="<f4", count=math.prod(self.shape),
                           offset=self.data_offset)


@dataclass(frozen=True)
class GGUFHeader:
    """A GGUF file's metadata (key -> :class:`HeaderField`) and tensor records, in order."""

    fields: dict[str, HeaderField]
    tensors: list[HeaderTensor]


def read_header(path: Path) -> GGUFHeader:
    """The header of ``path``, or a ``ValueError`` naming the file and what is wrong (not a
    GGUF, cut short, counts larger than the file can hold). Reads no tensor data."""
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a GGUF file")
    size = path.stat().st_size
    if size < 24:
        raise ValueError(f"{path}: not a GGUF file ({'empty' if not size else f'{size} bytes'})")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as head:
        tensors = _check_layout(path, head, size)
        try:
            return GGUFHeader(_fields(head), _named_once(tensors))
        except (struct.error, OverflowError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable GGUF file ({exc})") from None


def _fields(head: mmap.mmap) -> dict[str, HeaderField]:
    """The metadata of a file :func:`_check_layout` passed (a key given twice: the first)."""
    num_kv = struct.unpack_from("<Q", head, 16)[0]
    offset, fields = 24, {}
    for _ in range(num_kv):
        key, offset = _string(head, offset)
        kind = struct.unpack_from("<I", head, offset)[0]
        raw, offset = _parsed(head, offset + 4, kind)
        fields.setdefault(key.decode(errors="replace"), HeaderField(raw, kind))
    return fields


def _named_once(tensors: list[HeaderTensor]) -> list[HeaderTensor]:
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise ValueError(f"tensor {t.name!r} is listed twice")
        seen.add(t.name)
    return tensors


_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}


def _string(head: mmap.mmap, offset: int) -> tuple[bytes, int]:
    n = struct.unpack_from("<Q", head, offset)[0]
    return head[offset + 8:offset + 8 + n], offset + 8 + n


def _parsed(head: mmap.mmap, offset: int, kind: int) -> tuple[Any, int]:
    """(the value of type ``kind`` at ``offset``, where it ends): strings as bytes."""
    if kind in _FORMATS:
        return struct.unpack_from("<" + _FORMATS[kind], head, offset)[0], \
            offset + _SCALAR_BYTES[kind]
    if kind == _STRING:
        return _string(head, offset)
    item, n = struct.unpack_from("<IQ", head, offset)
    offset += 12
    if item in _FORMATS:
        end = offset + n * _SCALAR_BYTES[item]
        return list(struct.unpack_from(f"<{n}{_FORMATS[item]}", head, offset)), end
    items = []
    for _ in range(n):
        value, offset = _parsed(head, offset, item)
        items.append(value)
    return items, offset


def _decoded(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def read_summary(path: Path) -> tuple[str | None, str | None]:
    """``general.architecture`` and the file type (``"Q4_K_M"``; None for what the file does
    not say), without parsing the rest of the header.

    The header is walked with this module's bounds checks (a file cut short, or with counts
    past its end, is a ``ValueError``), then only these two keys are read:
    ``gguf.GGUFReader`` would parse each of the tokenizer's ~100,000 strings into arrays,
    seconds a model. A file without ``general.file_type`` is named after the type that holds
    most of its values. ``OSError`` where the file cannot be read.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as head:
        try:
            return _summary(path, head)
        except (struct.error, OverflowError) as exc:
            raise ValueError(f"{path}: corrupt GGUF header ({exc})") from None


def _summary(path: Path, head: mmap.mmap) -> tuple[str | None, str | None]:
    from gguf import GGMLQuantizationType, LlamaFileType

    size = len(head)
    tensors = _check_layout(path, head, size)
    num_kv = struct.unpack_from("<Q", head, 16)[0]
    offset, arch, file_type = 24, None, None
    for _ in range(num_kv):
        key_end = _value(path, head, size, offset, _STRING)
        kind = struct.unpack_from("<I", head, _need(path, size, key_end, 4) - 4)[0]
        key, at = head[offset + 8:key_end], key_end + 4
        offset = _value(path, head, size, at, kind)
        if key == b"general.architecture" and kind == _STRING:
            arch = bytes(head[at + 8:offset]).decode(errors="replace")
        elif key == b"general.file_type" and kind in (4, 5):  # uint32, int32
            file_type = struct.unpack_from("<I", head, at)[0]
        if arch is not None and file_type is not None:
            break
    if file_type is not None:
        try:
            name = LlamaFileType(file_type).name
        except ValueError:
            return arch, str(file_type)
        return arch, name.removeprefix("MOSTLY_").removeprefix("ALL_")
    counts: dict[int, int] = {}
    for t in tensors:
        counts[t.tensor_type] = counts.get(t.tensor_type, 0) + math.prod(t.shape)
    if not counts:
        return arch, None
    kind = max(counts, key=counts.__getitem__)
    try:
        return arch, GGMLQuantizationType(kind).name
    except ValueError:
        return arch, str(kind)


_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


def _check_layout(path: Path, head: mmap.mmap, size: int) -> list[HeaderTensor]:
    """Walk the header with bounds checks before it is read (an array length past the end of
    the file would have a reader loop for as long as the length says), and check that every
    tensor is whole blocks of a known type, inside the file; the tensor records, checked."""
    if head[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file (starts with {head[:4]!r}, not b'GGUF')")
    version, num_tensors, num_kv = struct.unpack_from("<IQQ", head, 4)
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3)")
    if num_kv * 13 + num_tensors * 24 > size:
        raise ValueError(f"{path}: truncated or corrupt GGUF header ({num_kv} metadata entries "
                         f"and {num_tensors} tensors cannot fit in {size} bytes)")
    offset, alignment = 24, 32
    for _ in range(num_kv):
        key_end = _value(path, head, size, offset, _STRING)
        kind = struct.unpack_from("<I", head, _need(path, size, key_end, 4) - 4)[0]
        if head[offset + 8:key_end] == b"general.alignment" and kind == _UINT32:
            alignment = struct.unpack_from("<I", head, _need(path, size, key_end + 4, 4) - 4)[0]
        offset = _value(path, head, size, key_end + 4, kind)
    if not alignment or alignment & (alignment - 1):
        raise ValueError(f"{path}: corrupt GGUF header (general.alignment = {alignment})")
    return _check_tensor_table(path, head, size, offset, num_tensors, alignment)


def _need(path: Path, size: int, offset: int, n: int) -> int:
    if offset + n > size:
        raise ValueError(f"{path}: truncated GGUF file (its header runs past the end of the "
                         f"file, {size} bytes)")
    return offset + n


def _value(path: Path, head: mmap.mmap, size: int, offset: int, kind: int,
           depth: int = 0) -> int:
    """Where the metadata value of type ``kind`` at ``offset`` ends."""
    if kind in _SCALAR_BYTES:
        return _need(path, size, offset, _SCALAR_BYTES[kind])
    if kind == _STRING:
        _need(path, size, offset, 8)
        return _need(path, size, offset + 8, struct.unpack_from("<Q", head, offset)[0])
    if kind != _ARRAY or depth > 3:
        raise ValueError(f"{path}: corrupt GGUF metadata (value type {kind} at byte {offset})")
    _need(path, size, offset, 12)
    item, n = struct.unpack_from("<IQ", head, offset)
    offset += 12
    if item in _SCALAR_BYTES:
        return _need(path, size, offset, n * _SCALAR_BYTES[item])
    _need(path, size, offset, n * 8)  # each string holds its length at least: n is bounded
    for _ in range(n):
        offset = _value(path, head, size, offset, item, depth + 1)
    return offset


def _check_tensor_table(path: Path, head: mmap.mmap, size: int, offset: int,
                        num_tensors: int, alignment: int) -> list[HeaderTensor]:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    spans = []
    for _ in range(num_tensors):
        name_end = _value(path, head, size, offset, _STRING)
        name = bytes(head[offset + 8:name_end]).decode(errors="replace")
        n_dims = struct.unpack_from("<I", head, _need(path, size, name_end, 4) - 4)[0]
        if not 1 <= n_dims <= 4:
            raise ValueError(f"{path}: tensor {name!r} has {n_dims} dimensions (GGUF: 1 to 4)")
        offset = _need(path, size, name_end + 4, 8 * n_dims + 12)
        *dims, kind, start = struct.unpack_from(f"<{n_dims}QIQ", head, name_end + 4)
        try:
            qtype = GGMLQuantizationType(kind)
        except ValueError:
            qtype = None
        if qtype not in GGML_QUANT_SIZES:
            raise ValueError(f"{path}: tensor {name!r} is stored as GGML type {kind}, which "
                             "no GGUF reader knows")
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        if dims[0] % block:
            raise ValueError(f"{path}: tensor {name!r} has rows of {dims[0]} values: a "
                             f"{qtype.name} row must hold whole blocks of {block} values")
        spans.append((name, tuple(dims), kind, start, math.prod(dims) // block * block_bytes))
    data = offset + (-offset % alignment)
    for name, _, _, start, nbytes in spans:
        if data + start + nbytes > size:
            raise ValueError(f"{path}: truncated GGUF file: tensor {name!r} needs bytes "
                             f"{data + start}..{data + start + nbytes}, the file has {size}")
    return [HeaderTensor(path, name, kind, dims, data + start, nbytes)
            for name, dims, kind, start, nbytes in spans]
