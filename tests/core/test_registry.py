"""The one registry behind agentrt's swappable parts: lazy imports, clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrt.core.registry import Registry, UnknownNameError


def test_string_entries_are_imported_on_first_get_and_cached():
    reg: Registry[type] = Registry("thing", {"od": "collections:OrderedDict"})
    assert reg._entries["od"] == "collections:OrderedDict"
    from collections import OrderedDict

    assert reg.get("od") is OrderedDict and reg._entries["od"] is OrderedDict
    assert reg.create("od", a=1) == {"a": 1}


def test_register_names_contains_and_iteration():
    reg: Registry[type] = Registry("thing")
    reg.register("b", dict)
    reg.register("a", "collections:Counter")
    assert reg.names() == ["a", "b"] == list(reg) and len(reg) == 2
    assert "a" in reg and "c" not in reg
    reg.register("b", list)  # replaces
    assert reg.get("b") is list


def test_unknown_names_list_the_choices_and_are_value_and_key_errors():
    reg: Registry[type] = Registry("attention backend", {"torch": "x:y", "cpu": "x:z"})
    with pytest.raises(ValueError, match=r"unknown attention backend 'tpu'; choose from 'cpu', "
                                         r"'torch'$"):
        reg.get("tpu")
    with pytest.raises(KeyError):
        reg.create("tpu")
    assert reg.check("auto", also=("auto",)) == "auto"
    with pytest.raises(UnknownNameError, match=r"choose from 'auto', 'cpu', 'torch'"):
        reg.check("gpu", also=("auto",))


def test_a_malformed_target_is_reported_with_its_name():
    reg: Registry[type] = Registry("parser", {"bad": "no_colon_here"})
    with pytest.raises(ValueError, match=r"parser 'bad': 'no_colon_here' is not 'module:attr'"):
        reg.get("bad")


def test_validating_every_registered_name_imports_none_of_them():
    code = (
        "import sys\n"
        "from agentrt.attention import BACKENDS\n"
        "from agentrt.backends import BACKENDS as B\n"
        "from agentrt.agent import PARSERS, TOOLS\n"
        "for reg in (BACKENDS, B, PARSERS, TOOLS):\n"
        "    [reg.check(n) for n in reg.names()]\n"
        "heavy = ['agentrt_kernels.flashinfer_backend', 'agentrt.backends.sglang',\n"
        "         'agentrt_tools.python_repl', 'agentrt.agent.parsers.react', 'httpx']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
