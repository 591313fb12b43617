"""Unknown keyword fields are named with the closest known one."""

from __future__ import annotations

import pytest

from agentrt import EngineConfig
from agentrt.core.fields import check_known, did_you_mean


def test_engine_config_names_the_field_it_meant():
    with pytest.raises(TypeError, match=r"'kv_cache_gigs' \(did you mean 'kv_cache_gb'\?\)"):
        EngineConfig(kv_cache_gigs=1)
    assert EngineConfig(kv_cache_gb=1).kv_cache_gb == 1


def test_no_hint_when_nothing_is_close():
    assert did_you_mean("zzz", ["kv_cache_gb"]) == ""
    with pytest.raises(TypeError, match="'a', 'b'|'a'.*'b'"):
        check_known("X", ["a", "b"], ["c"])
    check_known("X", ["c"], ["c"])
