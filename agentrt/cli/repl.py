"""``agentrt chat``'s loop: read a message (or a command), stream the answer, keep the turn.

Ollama's conventions: ``/bye``, ``/clear``, ``/?``; a message of several lines between
\"\"\"; Ctrl-C stops an answer, not the chat. On a terminal it prompts; from a pipe stdout
holds only the answers.
"""

from __future__ import annotations

import contextlib
import sys

from agentrt.cli.stats import AnswerTiming

__all__ = ["CHAT_EPILOG", "chat_command", "chat_turn", "read_message", "render",
           "system_messages"]


def render(engine, messages: list[dict[str, str]]) -> list[int]:
    """The prompt's token ids, as the chat layer makes them for serve: a message's text that
    writes a special token (``<|im_end|>``) stays plain text and cannot forge a turn."""
    from agentrt.chat.template import encode_prompt, render_prompt

    return encode_prompt(engine.tokenizer, render_prompt(engine.tokenizer, messages), messages)


def _echo(text: str) -> str:
    print(text, end="", flush=True)
    return text


_CHAT_HELP = """commands:
  /bye, /exit    end the chat (so does Ctrl-D)
  /clear         forget the conversation (keeps --system)
  /?, /help      this list
\"\"\" opens and closes a message of several lines.
Ctrl-C stops an answer (that turn is forgotten); an empty line is ignored."""
CHAT_EPILOG = f"""{_CHAT_HELP}

examples:
  agentrt chat --system 'You are terse.'
  printf 'My name is Ada.\\nWhat is my name?\\n' | agentrt chat --max-tokens 32"""


def read_message(tty: bool) -> str | None:
    """The user's next line, stripped, or the lines from one that starts with \"\"\" to one that
    ends with it (a message of several lines, as Ollama takes it); None at the end of input."""
    first = _read_line(tty, "you> ")
    if first is None or not first.lstrip().startswith('"""'):
        return None if first is None else first.strip()
    text = first.lstrip()[3:]
    while not text.rstrip().endswith('"""') and (line := _read_line(tty, "... ")) is not None:
        text += "\n" + line
    return text.rstrip().removesuffix('"""').strip()


def _read_line(tty: bool, prompt: str) -> str | None:
    """The next line as typed (a terminal shows ``prompt``); None at the end of input (Ctrl-D).
    Ctrl-C at a terminal's prompt only says how to quit, as in Ollama; elsewhere it ends the
    chat (130)."""
    while True:
        try:
            return input(prompt if tty else "")
        except EOFError:
            if tty:
                print()
            return None
        except KeyboardInterrupt:
            if not tty:
                raise
            print("\n(/bye or Ctrl-D to quit)", file=sys.stderr)


def chat_command(line: str, messages: list[dict[str, str]], system: str | None) -> bool:
    """Run a /command; False when it ends the chat."""
    name = line.split()[0]
    if name in ("/bye", "/exit"):
        return False
    if name == "/clear":
        messages[:] = system_messages(system)
        print("(conversation cleared)", file=sys.stderr)
    elif name in ("/?", "/help"):
        print(_CHAT_HELP, file=sys.stderr)
    else:
        print(f"unknown command {name[:40]!r}; /? lists the commands", file=sys.stderr)
    return True


def chat_turn(engine, params, messages: list[dict[str, str]], line: str, tty: bool,
              timing: AnswerTiming | None = None) -> bool:
    """Answer one message; the turn joins the conversation only when its answer is whole (a
    Ctrl-C or a conversation over the context leaves it as it was). With ``timing``
    (``--verbose``) its numbers follow the answer on stderr. True when answered."""
    turn = [*messages, {"role": "user", "content": line}]
    if tty:
        print("assistant> ", end="", flush=True)
    parts: list[str] = []
    try:
        with contextlib.closing(engine.stream(render(engine, turn), params)) as deltas:
            parts.extend(_echo((timing.see(d) if timing else d).text) for d in deltas)
    except KeyboardInterrupt:
        print()
        print("(answer interrupted)", file=sys.stderr)
        return False
    except ValueError as exc:  # the conversation no longer fits the context
        print()
        print(f"agentrt: error: {exc} (/clear starts over)", file=sys.stderr)
        return False
    print()
    messages[:] = [*turn, {"role": "assistant", "content": "".join(parts)}]
    if timing is not None:
        timing.print()
    return True




def system_messages(system: str | None) -> list[dict[str, str]]:
    """The conversation's start: the ``--system`` message, if any."""
    return [{"role": "system", "content": system}] if system else []
