"""agentrt's GGUF header reader against ``gguf.GGUFReader`` on a file holding every metadata
value type, arrays of each, a nested array and tensors of two types: the same keys, values and
tensor records (the reader stays the reference; agentrt reads the header itself because the
reader parses a tokenizer's ~100,000 strings into arrays, seconds a load)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrt.models.gguf_header import read_header


@pytest.fixture(scope="module")
def every_type(tmp_path_factory):
    import gguf

    path = tmp_path_factory.mktemp("header") / "every-type.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 0.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ✓")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 1e-300)
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.5, -1.5])
    w.add_array("t.bools", [True, False, True])
    w.add_array("t.strs", ["a", "", "ß€", "<|end|>"])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_array("t.empty", [])
    rng = np.random.default_rng(0)
    w.add_tensor("a.weight", rng.standard_normal((4, 64)).astype(np.float32))
    q8 = gguf.GGMLQuantizationType.Q8_0
    w.add_tensor("b.weight", gguf.quants.quantize(rng.standard_normal((3, 64)).astype(np.float32),
                                                  q8), raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_header_reads_as_gguf_s_reader_reads_it(every_type):
    import gguf

    ours, theirs = read_header(every_type), gguf.GGUFReader(str(every_type))
    keys = {k for k in theirs.fields if not k.startswith("GGUF.")}  # the reader's own entries
    assert set(ours.fields) == keys
    # NOTE: the reader flattens an array of arrays ([1, 2, 3]); its items are kept here
    assert ours.fields["t.nested"].contents() == [[1, 2], [3]]
    for key in keys - {"t.nested"}:
        want, got = theirs.fields[key].contents(), ours.fields[key].contents()
        if isinstance(want, float):
            assert math.isclose(got, want, rel_tol=1e-6), key
        else:
            assert got == want and type(got) is type(want), key
        assert len(ours.fields[key]) == (len(want) if isinstance(want, list) else 1), key
    assert [(t.name, t.tensor_type, t.shape, t.data_offset, t.n_bytes) for t in ours.tensors] \
        == [(t.name, int(t.tensor_type), tuple(int(d) for d in t.shape), int(t.data_offset),
             int(t.n_bytes)) for t in theirs.tensors]
    assert np.array_equal(ours.tensors[0].data, theirs.tensors[0].data.reshape(-1))
