"""Streaming parsers: statement detection, JSON values, ReAct, errors, and split invariance."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.agent.parsers import create_parser
from agentrt.agent.parsers.base import (
    CallEnd,
    CallStart,
    FinalAnswer,
    ParseError,
    Piece,
    ToolName,
)
from agentrt.agent.parsers.statements import PythonStatementSplitter, SqlStatementSplitter


def parse(name: str, chunks, **kwargs):
    parser = create_parser(name, **kwargs)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.close()


def statements(code: str) -> list[str]:
    events = parse("fenced_code", [f"```python\n{code}```\n"])
    return [e.text for e in events if isinstance(e, Piece)]


# -- fenced code: statements, dedent, lookahead ------------------------------------------------


def test_simple_statements_are_emitted_at_their_newline():
    parser = create_parser("fenced_code")
    assert parser.feed("Here:\n```python\nx = 1\n") == [
        CallStart("fenced_code"),
        ToolName("python_repl"),
        Piece("statement", "x = 1\n"),
    ]
    assert parser.feed("y = [1,\n") == []  # open bracket: not complete
    assert parser.feed("  2]\n") == [Piece("statement", "y = [1,\n  2]\n")]
    assert parser.feed("```\n") == [CallEnd()]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("if a:\n    b()\nelse:\n    c()\nd()\n", ["if a:\n    b()\nelse:\n    c()\n", "d()\n"]),
        (
            "if a:\n    b()\nelif x:\n    pass\nelse:\n    c()\n",
            ["if a:\n    b()\nelif x:\n    pass\nelse:\n    c()\n"],
        ),
        (
            "try:\n    f()\nexcept E:\n    g()\nfinally:\n    h()\nz = 1\n",
            ["try:\n    f()\nexcept E:\n    g()\nfinally:\n    h()\n", "z = 1\n"],
        ),
        ("for i in x:\n    pass\nelse:\n    q()\n", ["for i in x:\n    pass\nelse:\n    q()\n"]),
        ("while x:\n    x -= 1\ny = 2\n", ["while x:\n    x -= 1\n", "y = 2\n"]),
        (
            "@dec\n@other(1,\n       2)\ndef f():\n    return 1\nf()\n",
            ["@dec\n@other(1,\n       2)\ndef f():\n    return 1\n", "f()\n"],
        ),
        (
            "class A:\n    x = 1\n\n    def m(self):\n        return 2\n\nA()\n",
            ["class A:\n    x = 1\n\n    def m(self):\n        return 2\n", "A()\n"],
        ),
        # a comment or blank line in column 0 does not close a block
        (
            "def f():\n    a = 1\n# note\n\n    return a\nf()\n",
            ["def f():\n    a = 1\n# note\n\n    return a\n", "f()\n"],
        ),
        ("x = 1 + \\\n    2\n", ["x = 1 + \\\n    2\n"]),
        (
            's = """\nnot code:\nelse:\n"""\nprint(s)\n',
            ['s = """\nnot code:\nelse:\n"""\n', "print(s)\n"],
        ),
        ("d = {'a': '}',\n     'b': 2}\n", ["d = {'a': '}',\n     'b': 2}\n"]),
        (
            "match p:\n    case 1:\n        pass\nmatch = 3\n",
            ["match p:\n    case 1:\n        pass\n", "match = 3\n"],
        ),
        ("async def f():\n    await g()\nx = 1\n", ["async def f():\n    await g()\n", "x = 1\n"]),
        ("if x: y = 1\nelse: y = 2\n", ["if x: y = 1\nelse: y = 2\n"]),
    ],
)
def test_statement_boundaries(code, expected):
    assert statements(code) == expected


def test_triple_quoted_string_fence_line_is_not_treated_as_closing_inside_markdown():
    # Markdown semantics win: a ``` line closes the block even inside a string.
    events = parse("fenced_code", ['```python\ns = """\n```\n'])
    assert events[-1] == CallEnd()


def test_indented_fence_and_tilde_fence_and_other_languages():
    text = (
        "  ```py\n  a = 1\n  b = 2\n  ```\n~~~bash\nls\n~~~\n~~~sql\nSELECT 1; SELECT\n 2;\n~~~\n"
    )
    events = parse("fenced_code", [text])
    assert events == [
        CallStart("fenced_code"),
        ToolName("python_repl"),
        Piece("statement", "a = 1\n"),
        Piece("statement", "b = 2\n"),
        CallEnd(),
        CallStart("fenced_code"),
        ToolName("sqlite"),
        Piece("statement", "SELECT 1;"),
        Piece("statement", "SELECT\n 2;"),
        CallEnd(),
    ]


def test_unclosed_fence_is_an_error_event():
    events = parse("fenced_code", ["```python\nx = 1\nfor i in x:\n    pass\n"])
    assert events[:3] == [
        CallStart("fenced_code"),
        ToolName("python_repl"),
        Piece("statement", "x = 1\n"),
    ]
    assert isinstance(events[-1], ParseError)
    assert "unclosed code fence" in events[-1].message
    assert CallEnd() not in events


def test_splitters_flush_the_pending_statement():
    splitter = PythonStatementSplitter()
    assert splitter.push("def f():\n    return 1") == []
    assert splitter.flush() == ["def f():\n    return 1\n"]
    sql = SqlStatementSplitter()
    assert sql.push("SELECT ';' AS x; SELECT 2") == ["SELECT ';' AS x;"]
    assert sql.pending == " SELECT 2"
    assert sql.flush() == ["SELECT 2"]


# -- JSON tool calls --------------------------------------------------------------------------

CALL = (
    'I will call it. <tool_call>{"name": "sqlite", "arguments": {"query": "SELECT a, b FROM t;",'
    ' "n": -1.5e3, "flags": [true, false, null], "nested": {"k": [1, {"x": "y"}]},'
    ' "esc": "tab\\t quote\\" slash\\/ \\u00e9 \\ud83d\\ude00 \\\\"}}</tool_call> done'
)


def test_json_call_emits_name_then_each_argument_with_json_values():
    events = parse("json_toolcall", [CALL])
    assert events[:2] == [CallStart("json_toolcall"), ToolName("sqlite")]
    assert events[-1] == CallEnd()
    arguments = {e.key: e.value for e in events if isinstance(e, Piece) and e.kind == "argument"}
    start = CALL.index("<tool_call>") + len("<tool_call>")
    assert arguments == json.loads(CALL[start : CALL.index("</tool_call>")])["arguments"]
    pieces = [e for e in events if isinstance(e, Piece)]
    query_deltas = [e.text for e in pieces if e.kind == "delta" and e.key == "query"]
    assert "".join(query_deltas) == "SELECT a, b FROM t;"
    assert query_deltas[:2] == ["SELECT ", "a,"]  # cut after each non-word character


def test_name_is_emitted_as_soon_as_its_string_closes():
    parser = create_parser("json_toolcall")
    assert parser.feed('<tool_call>{"name": "calc') == [CallStart("json_toolcall")]
    assert parser.feed('ulator", "argu') == [ToolName("calculator")]


def test_truncated_json_is_an_error_event():
    events = parse("json_toolcall", ['<tool_call>{"name": "x", "arguments": {"a": [1, 2'])
    assert isinstance(events[-1], ParseError)
    assert "truncated tool call" in events[-1].message


@pytest.mark.parametrize(
    "bad",
    [
        '{"name": "x", "arguments": {"a": tru}}',
        '{"name": "x" "arguments": {}}',
        '{"name": "x", "arguments": {"a": 01}}',
        '{"name": "x", "arguments": {"a": "\\q"}}',
        '{"arguments": {}}',
        '["name"]',
    ],
)
def test_invalid_json_is_an_error_event_and_the_parser_recovers(bad):
    good = '<tool_call>{"name": "ok", "arguments": {}}</tool_call>'
    events = parse("json_toolcall", [f"<tool_call>{bad}</tool_call> then {good}"])
    errors = [e for e in events if isinstance(e, ParseError)]
    assert len(errors) == 1 and "tool call" in errors[0].message
    assert events[-2:] == [ToolName("ok"), CallEnd()]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=4), st.booleans())
def test_argument_values_equal_json_loads(arguments, ascii_only):
    text = json.dumps({"name": "t", "arguments": arguments}, ensure_ascii=ascii_only)
    events = parse("json_toolcall", ["<tool_call>" + text + "</tool_call>"])
    got = {e.key: e.value for e in events if isinstance(e, Piece) and e.kind == "argument"}
    assert got == json.loads(text)["arguments"]
    assert events[-1] == CallEnd()


# -- ReAct ------------------------------------------------------------------------------------


def test_react_action_and_input_until_observation():
    parser = create_parser("react")
    events = parser.feed('Thought: I should search.\nAction: search\nAction Input: "python sort"\n')
    assert events == [CallStart("react"), ToolName("search")]
    assert parser.feed("Observ") == []
    assert parser.feed("ation") == [Piece("input", "python sort"), CallEnd()]


def test_react_final_answer_and_errors():
    assert parse("react", ["Thought: done\nFinal Answer: 42\nis the answer"]) == [
        FinalAnswer("42\nis the answer")
    ]
    missing = parse("react", ["Action: search\nSomething else\n"])
    assert isinstance(missing[-1], ParseError) and "Action Input" in missing[-1].message
    both = parse("react", ["Action: a\nAction Input: x\nFinal Answer: y"])
    assert [type(e) for e in both] == [CallStart, ToolName, Piece, CallEnd, ParseError]


def test_react_input_runs_to_the_end_of_the_output():
    events = parse("react", ["Action: python_repl\nAction Input: x = 1\nprint(x)"])
    assert Piece("input", "x = 1\nprint(x)") in events


# -- split invariance -------------------------------------------------------------------------

SAMPLES = {
    "fenced_code": (
        "Voilà — le code:\n```python\nimport math\n@dec\ndef f(x):\n    '''é😀\n```\n'''\n"
        "    return x\n\nif f(1):\n    s = \"日本\\\n語\"\nelse:\n    pass\nprint(f('ü'))\n```\n"
        "then ~~~sql\n```sql\nSELECT 'a;b' AS x; SELECT 2\n```\nand ```python\nlast = 1\n"
    ),
    "json_toolcall": CALL
    + ' <tool_call>{"name": "日本", "arguments": {"s": "€\\u20ac"}} '
    + '<tool_call>{"name": "x", "arguments": {"a": [1, 2',
    "llama3_json": (
        'Checking 😀 <|python_tag|>{"name": "search", "parameters": {"query": "日本 €", '
        '"n": [1, 2.5e3]}}; {"name": "g", "parameters": {}} and {"name": oops} tail '
        '{"name": "h", "parameters": {"s": "\\u00fc\\ud83d\\ude00"}} {"type": "function", '
        '"name": "k", "parameters": {"b": null}}; {"name": "t", "par'
    ),
    "mistral_json": (
        'OK [TOOL_CALLS] [{"name": "search", "arguments": {"query": "ü 日本"}, "id": "abc123xyz"}, '
        '{"name": "g", "arguments": {}}] after [TOOL_CALLS][{"name": "h", "arguments": {"a": '
        'true}}] [TOOL_CALLS] [{"name": 5}] [TOOL_CALLS] [{"name": "t", "arguments": {"a": [1'
    ),
    "mistral_args": (
        'OK 😀 [TOOL_CALLS]search[ARGS]{"query": "ü 日本"}[TOOL_CALLS]g[CALL_ID]abc123xyz[ARGS]{} '
        'then [TOOL_CALLS]bad name[ARGS]{} [TOOL_CALLS]h[ARGS]{"a": true}[TOOL_CALLS]n[ARGS]5 '
        '[TOOL_CALLS]t[ARGS]{"a": [1'
    ),
    "qwen_xml": (
        "Sure 😀\n<tool_call>\n<function=search>\n<parameter=query>\ncafé\n日本\n\n</parameter>\n"
        "<parameter=n>\n3\n</parameter>\n</function>\n</tool_call> <tool_call>\n<function=g>\n"
        "</function>\n</tool_call><tool_call><function=bad name></function></tool_call> x "
        "<tool_call>\n<function=h>\n<parameter=a>\ntrue\n</parameter>\n<parameter=a>\n1\n"
        "</parameter>\n</function></tool_call><tool_call>\n<function=k>\n<parameter=s>\n[1]"
        "\n</parameter>\njunk</function><tool_call>\n<function=t>\n<parameter=code>\nprint(1)\n"
    ),
    "react": (
        'Thought: ümlaut 😀\nAction: search\nAction Input: "€ prices"\nObservation: x\n'
        "Action: python_repl\nAction Input: print('日本')\nx = 1\nThought: ok\nFinal Answer: 答え"
    ),
}


def split_text(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@pytest.mark.parametrize("syntax", sorted(SAMPLES))
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_resplitting_of_text_gives_identical_events(syntax, cuts):
    text = SAMPLES[syntax]
    assert parse(syntax, split_text(text, cuts)) == parse(syntax, [text])


@pytest.mark.parametrize("syntax", sorted(SAMPLES))
@settings(max_examples=80, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_resplitting_of_utf8_bytes_gives_identical_events(syntax, cuts):
    data = SAMPLES[syntax].encode()
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert parse(syntax, chunks) == parse(syntax, [SAMPLES[syntax]])


@pytest.mark.parametrize("syntax", sorted(SAMPLES))
def test_character_by_character_and_byte_by_byte(syntax):
    text = SAMPLES[syntax]
    whole = parse(syntax, [text])
    assert parse(syntax, list(text)) == whole
    assert parse(syntax, [bytes([b]) for b in text.encode()]) == whole
    assert any(isinstance(e, CallEnd) for e in whole)
