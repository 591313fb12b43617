"""KVCacheTensors: the device KV cache, shared by the KV manager and the attention backends,
and the host tier swapped pages go to."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["KVCacheTensors"]


@dataclass(frozen=True)
class KVCacheTensors:
    """The device KV cache: K and V of shape (layers, num_pages, page_size, kv_heads, head_dim).

    Per layer this is FlashInfer's NHD paged layout, passed as a (k, v) tuple.
    """

    k: torch.Tensor
    v: torch.Tensor

    @property
    def page_size(self) -> int:
        return self.k.shape[2]

    def layer_slots(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of ``layer`` as flat slots: (num_pages * page_size, kv_heads, head_dim)."""
        k, v = self.k[layer], self.v[layer]
        return k.view(-1, *k.shape[2:]), v.view(-1, *v.shape[2:])

    @classmethod
    def allocate(cls, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: str | torch.device = "cpu",
                 ) -> KVCacheTensors:
        shape = (num_layers, num_pages, page_size, num_kv_heads, head_dim)
        return cls(torch.zeros(shape, dtype=dtype, device=device),
                   torch.zeros(shape, dtype=dtype, device=device))

    @classmethod
    def allocate_host(cls, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int,
                      head_dim: int, dtype: torch.dtype, pin_memory: bool = False,
                      ) -> KVCacheTensors:
        """A host pool for swapped-out pages; ``pin_memory`` for a CUDA device's pool (page-
        locked, so copies to and from the GPU are asynchronous DMA).

        NOTE: the storage is page-major, (num_pages, layers, page_size, kv_heads, head_dim),
        so every page (all layers) is one contiguous block a single async copy can fill; ``k``
        and ``v`` are views of it in the usual (layers, num_pages, ...) order.
        """
        shape = (num_pages, num_layers, page_size, num_kv_heads, head_dim)
        k, v = (torch.zeros(shape, dtype=dtype, pin_memory=pin_memory) for _ in range(2))
        return cls(k.transpose(0, 1), v.transpose(0, 1))

    @property
    def num_pages(self) -> int:
        return self.k.shape[1]

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def is_page_major(self) -> bool:
        """Each page (all layers) is contiguous: a pool from :meth:`allocate_host`."""
        return self.k.transpose(0, 1).is_contiguous() and self.v.transpose(0, 1).is_contiguous()

    def copy_pages(self, dst: KVCacheTensors, src_pages: list[int], dst_pages: list[int]) -> None:
        """Copy whole pages (all layers) from this cache into ``dst``; used for swapping."""
        src = torch.tensor(src_pages, dtype=torch.int64, device=self.k.device)
        idx = torch.tensor(dst_pages, dtype=torch.int64, device=dst.k.device)
        dst.k.index_copy_(1, idx, self.k.index_select(1, src).to(dst.k.device))
        dst.v.index_copy_(1, idx, self.v.index_select(1, src).to(dst.v.device))
