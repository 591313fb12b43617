"""``agentrt models`` (what ``--model`` can name on this machine) and ``agentrt pull`` (the
one command that downloads a model)."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["PULL_EPILOG", "cmd_models", "cmd_pull"]

PULL_EPILOG = """examples:
  agentrt pull Qwen/Qwen3-4B-GGUF:Q4_K_M       # one GGUF file of the repository
  agentrt pull Qwen/Qwen3-0.6B                  # a safetensors model folder
  agentrt run --model Qwen/Qwen3-4B-GGUF:Q4_K_M "Hello"
"""


def cmd_models(args: argparse.Namespace) -> int:
    """List the models on this machine that --model can name: the embedded default, Ollama's
    store ($OLLAMA_MODELS or ~/.ollama/models) and the Hugging Face cache ($HF_HUB_CACHE, or
    $HF_HOME/hub, or ~/.cache/huggingface/hub). Reads file headers only; downloads nothing.
    A damaged entry (a manifest that does not parse, a missing blob, a broken link) is not
    listed; a line on stderr names it and says why."""
    from agentrt.models.sources import SkippedModel, list_local_models

    skipped: list[SkippedModel] = []
    found = list_local_models(skipped=skipped)
    for skip in skipped:
        print(f"agentrt: skipped {skip.name} ({skip.path}): {skip.reason}", file=sys.stderr)
    if args.json:
        rows = [{**vars(m), "path": str(m.path)} for m in found]
        print(json.dumps(rows, indent=2))
        return 0
    if not found:
        print("no models found (see `agentrt models --help` for where agentrt looks)",
              file=sys.stderr)
        return 0
    header = ("NAME", "ARCHITECTURE", "FORMAT", "SIZE", "SOURCE")
    rows = [(m.name, m.architecture or "?", m.format or "?", _size(m.size_bytes), m.source)
            for m in found]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    """Download a model from the Hugging Face hub into its local cache (the only agentrt
    command that downloads). NAME is org/name:QUANT (one GGUF file of a GGUF repository,
    by quantization or file name), org/name (a safetensors model folder, or a repository's
    only GGUF), with @REVISION for a branch, tag or commit. An interrupted download resumes
    when run again; each file is checked against the hub's checksum. $HF_ENDPOINT names a
    mirror, $HF_TOKEN a token for gated models; $HF_HUB_OFFLINE refuses. Ollama's names
    stay read-only (use `ollama pull`). Prints the path; `agentrt models` lists it after."""
    from agentrt.models.pull import pull

    pulled = pull(args.name, progress=not args.quiet)
    if not args.quiet:
        done = f"downloaded {_size(pulled.downloaded_bytes)}" if pulled.downloaded_bytes \
            else "already in the cache"
        print(f"agentrt: {args.name}: {done}; run it with `agentrt run --model {args.name} "
              "...`", file=sys.stderr)
    print(pulled.path)
    return 0


def _size(num_bytes: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if num_bytes < 1000 or unit == "GB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    return ""  # pragma: no cover
