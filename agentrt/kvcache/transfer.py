"""Page copies between the device KV pool and the host pool (swap out, swap in).

:class:`PageCopier` copies synchronously with ``KVCacheTensors.copy_pages``: the CPU engine's
path, unchanged. :class:`CudaPageCopier` serves a CUDA pool and a pinned, page-major host pool
(``KVCacheTensors.allocate_host``) on a side stream, so a swap does not hold up the forward
pass:

- swap out: the side stream waits for the work already queued (the pages' KV is written),
  gathers the pages on the device, then copies each run of consecutive host pages with one
  asynchronous device-to-host copy. It returns an event; the KV manager keeps the device pages
  allocated until the event has completed, so the next forward pass runs while they copy.
- swap in: host runs are copied into a device staging buffer and scattered into the new device
  pages on the side stream; the compute stream waits for that event (a GPU-side wait, the host
  goes on scheduling) before its next kernel, which is the first that may read those pages.
"""

from __future__ import annotations

from itertools import groupby
from typing import NamedTuple

import torch

from agentrt.core.kv_tensors import KVCacheTensors

__all__ = [
    "CudaPageCopier",
    "PageCopier",
    "PageRun",
    "copy_from_host",
    "copy_to_host",
    "make_copier",
    "page_runs",
]


class PageCopier:
    """Synchronous page copies (CPU pools, or any pool without a CUDA device)."""

    def swap_out(self, device: KVCacheTensors, host: KVCacheTensors, src_pages: list[int],
                 dst_pages: list[int]) -> object | None:
        """Copy ``src_pages`` of ``device`` into ``dst_pages`` of ``host``. Returns None when
        the copy is complete, or an event to poll (``query``) before reusing ``src_pages``."""
        device.copy_pages(host, src_pages, dst_pages)
        return None

    def swap_in(self, host: KVCacheTensors, device: KVCacheTensors, src_pages: list[int],
                dst_pages: list[int]) -> None:
        """Copy ``src_pages`` of ``host`` into ``dst_pages`` of ``device``, ordered before any
        later forward pass."""
        host.copy_pages(device, src_pages, dst_pages)

    def synchronize(self) -> None:
        """Wait until every copy issued so far is complete."""


class CudaPageCopier(PageCopier):
    """Copies on a side CUDA stream between a CUDA pool and a pinned page-major host pool."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def swap_out(self, device: KVCacheTensors, host: KVCacheTensors, src_pages: list[int],
                 dst_pages: list[int]) -> torch.cuda.Event:
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            copy_to_host(device, host, src_pages, dst_pages)
            done = torch.cuda.Event()
            done.record(self.stream)
        return done

    def swap_in(self, host: KVCacheTensors, device: KVCacheTensors, src_pages: list[int],
                dst_pages: list[int]) -> None:
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            copy_from_host(host, device, src_pages, dst_pages)
            done = torch.cuda.Event()
            done.record(self.stream)
        torch.cuda.current_stream(self.device).wait_event(done)

    def synchronize(self) -> None:
        self.stream.synchronize()


class PageRun(NamedTuple):
    """Entries ``[first, last)`` of a page list, which are the consecutive page ids
    ``[first_page, first_page + last - first)``."""

    first: int
    last: int
    first_page: int

    @property
    def pages(self) -> slice:
        return slice(self.first_page, self.first_page + self.last - self.first)

    @property
    def entries(self) -> slice:
        return slice(self.first, self.last)


def page_runs(pages: list[int]) -> list[PageRun]:
    """Split ``pages`` into runs of consecutive ids, one async copy each."""
    runs, i = [], 0
    for _, group in groupby(enumerate(pages), key=lambda ip: ip[1] - ip[0]):
        n = len(list(group))
        runs.append(PageRun(i, i + n, pages[i]))
        i += n
    return runs


def copy_to_host(device: KVCacheTensors, host: KVCacheTensors, src_pages: list[int],
                 dst_pages: list[int]) -> None:
    """Gather ``src_pages`` on the device, then one non-blocking copy per run of consecutive
    ``dst_pages`` into the page-major ``host`` pool (on the current stream)."""
    src = torch.tensor(src_pages, dtype=torch.int64).to(device.device, non_blocking=True)
    for dev, hst in ((device.k, host.k), (device.v, host.v)):
        pages = dev.index_select(1, src).transpose(0, 1).contiguous()  # (n, L, P, KVH, D)
        for run in page_runs(dst_pages):
            hst.transpose(0, 1)[run.pages].copy_(pages[run.entries], non_blocking=True)


def copy_from_host(host: KVCacheTensors, device: KVCacheTensors, src_pages: list[int],
                   dst_pages: list[int]) -> None:
    """One non-blocking copy per run of consecutive ``src_pages`` of the page-major ``host``
    pool into a device staging buffer, then a scatter into ``dst_pages`` (current stream)."""
    dst = torch.tensor(dst_pages, dtype=torch.int64).to(device.device, non_blocking=True)
    for hst, dev in ((host.k, device.k), (host.v, device.v)):
        shape = (len(src_pages), dev.shape[0], *dev.shape[2:])
        staging = torch.empty(shape, dtype=dev.dtype, device=dev.device)  # (n, L, ...)
        for run in page_runs(src_pages):
            staging[run.entries].copy_(hst.transpose(0, 1)[run.pages], non_blocking=True)
        dev.index_copy_(1, dst, staging.transpose(0, 1))


def make_copier(device: KVCacheTensors, host: KVCacheTensors | None) -> PageCopier:
    """The copier for a device pool and its host pool: side-stream copies when the device
    pool is on CUDA and the host pool is pinned and page-major, else synchronous copies."""
    if host is None or device.device.type != "cuda":
        return PageCopier()
    if not (host.k.is_pinned() and host.is_page_major):
        return PageCopier()
    return CudaPageCopier(device.device)
