"""KVCacheTensors: the device KV cache, shared by the KV manager and the attention backends."""

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

    @property
    def num_pages(self) -> int:
        return self.k.shape[1]

    def copy_pages(self, dst: KVCacheTensors, src_pages: list[int], dst_pages: list[int]) -> None:
        """Copy whole pages (all layers) from this cache into ``dst``; used for swapping."""
        src = torch.tensor(src_pages, dtype=torch.int64, device=self.k.device)
        idx = torch.tensor(dst_pages, dtype=torch.int64, device=dst.k.device)
        dst.k.index_copy_(1, idx, self.k.index_select(1, src).to(dst.k.device))
        dst.v.index_copy_(1, idx, self.v.index_select(1, src).to(dst.v.device))
