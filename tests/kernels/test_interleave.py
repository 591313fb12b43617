"""The interleaved order of Q4_K / Q6_K weights: a permutation of the file's bytes, undone
exactly, laid out as the AVX-512 kernels read it (``X16`` in gguf_int8.cpp)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T

from agentrt_kernels.cpu.interleave import (
    GROUP,
    file_order,
    file_rows,
    interleave_,
    runs_interleaved,
)


def _rows(qtype: T, n: int, blocks: int, seed: int = 0) -> torch.Tensor:
    size = GGML_QUANT_SIZES[qtype][1]
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, (n, blocks * size), dtype=np.uint8))


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K])
@pytest.mark.parametrize(("n", "blocks"), [(16, 1), (48, 3)])
def test_interleaving_is_a_permutation_undone_exactly(qtype, n, blocks):
    rows = _rows(qtype, n, blocks)
    before = rows.clone()
    interleave_(rows, qtype)
    assert not torch.equal(rows, before)
    assert torch.equal(rows.reshape(-1).sort().values, before.reshape(-1).sort().values)
    assert torch.equal(file_order(rows, qtype), before)
    index = torch.tensor([0, n - 1, 17 % n, 3, 3])
    assert torch.equal(file_rows(rows, qtype, index), before[index])


def test_q4_k_layout_is_what_the_kernel_reads():
    """Per 16 rows and super-block: d x 16, dmin x 16, 12 scale planes, then vector 8j + l
    holding qs bytes 32j + 4l .. + 3 of every row (see X16<Q4_K>)."""
    rows = _rows(T.Q4_K, 32, 2)
    before = rows.clone().numpy()
    interleave_(rows, T.Q4_K)
    flat = rows.numpy().reshape(-1)
    second = 16 * 2 * 144 + 2304  # group 1, super-block 1
    block = flat[second:second + 2304]
    file_block = before[16:32, 144:288]  # rows 16..31, their second block
    assert (block[:32].reshape(16, 2) == file_block[:, 0:2]).all()
    assert (block[32:64].reshape(16, 2) == file_block[:, 2:4]).all()
    assert (block[64:256].reshape(12, 16) == file_block[:, 4:16].T).all()
    j, at = 2, 5
    vector = block[256 + 64 * (8 * j + at):][:64].reshape(16, 4)
    assert (vector == file_block[:, 16 + 32 * j + 4 * at:][:, :4]).all()


def test_q6_k_layout_is_what_the_kernel_reads():
    """d x 16, 16 scale planes, ql vectors 8 (2h + p) + l, qh vectors 8h + l (X16<Q6_K>)."""
    rows = _rows(T.Q6_K, 16, 1)
    before = rows.clone().numpy()
    interleave_(rows, T.Q6_K)
    block = rows.numpy().reshape(-1)
    assert (block[:32].reshape(16, 2) == before[:, 208:210]).all()
    assert (block[32:288].reshape(16, 16) == before[:, 192:208].T).all()
    h, p, at = 1, 1, 6
    ql = block[288 + 64 * (8 * (2 * h + p) + at):][:64].reshape(16, 4)
    assert (ql == before[:, 64 * h + 32 * p + 4 * at:][:, :4]).all()
    qh = block[2336 + 64 * (8 * h + at):][:64].reshape(16, 4)
    assert (qh == before[:, 128 + 32 * h + 4 * at:][:, :4]).all()


def test_which_weights_have_an_interleaved_form():
    assert runs_interleaved(T.Q4_K, 32) and runs_interleaved(T.Q6_K, GROUP)
    assert not runs_interleaved(T.Q4_K, 40) and not runs_interleaved(T.Q5_K, 32)
    assert not runs_interleaved(T.Q8_0, 32)
    with pytest.raises(ValueError, match="no interleaved form"):
        interleave_(_rows(T.Q4_K, 8, 1), T.Q4_K)
    with pytest.raises(ValueError, match="uint8"):
        interleave_(_rows(T.Q4_K, 16, 1).to(torch.int16), T.Q4_K)
