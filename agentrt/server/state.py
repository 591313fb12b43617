"""What every endpoint shares: the one backend, the served model names, the metrics.

Every endpoint generates through one :class:`~agentrt.backends.base.Backend`: the local
engine's (one :class:`agentrt.Engine` per server process, whose continuous batching serves
all clients), or an SGLang server's / router's (``agentrt serve --backend sglang``), for which
this server renders chats, parses tool calls and keeps the OpenAI and native APIs. Only the
local engine has a load to report and a prefix cache to flush (:attr:`ServerState.engine`).
A request's ``model`` must be one of the served names, but matching is lenient: case does
not matter, an ``org/`` prefix is ignored (``HuggingFaceTB/SmolLM2-135M-Instruct`` works),
the ``--model`` value as typed works too, and an omitted ``model`` means the served model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request

from agentrt import env
from agentrt.models import DEFAULT_MODEL
from agentrt.server.errors import APIError
from agentrt.server.metrics import ServerMetrics
from agentrt.session_table import SessionTable

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.core.sampling_params import SamplingParams
    from agentrt.engine.engine import Engine

__all__ = ["ServerState", "State", "default_model_names", "get_state"]


def default_model_names(model: str | None) -> list[str]:
    """The names a model is served under: its short name, then the ``--model`` value.

    An ``ollama:NAME`` model answers to the names a client of Ollama's own OpenAI API sends:
    the name as ``ollama list`` prints it first (``qwen3:0.6b``), the name as given, and the
    bare name where the tag is ``latest`` (Ollama reads ``llama3.2`` as ``llama3.2:latest``).
    """
    model = model or env.default_model()
    if model is None:
        return [DEFAULT_MODEL]
    if model.startswith("ollama:"):
        return list(dict.fromkeys([*_ollama_names(model.removeprefix("ollama:")), model]))
    short = Path(model.rstrip("/")).name.removesuffix(".gguf")
    return list(dict.fromkeys([short, model]))


def _ollama_names(name: str) -> list[str]:
    """What Ollama's clients call the model ``name``: its listed name, ``name``, and the name
    without ``:latest`` (nothing where ``name`` is not a valid Ollama name)."""
    from agentrt.models.sources import parse_ollama_name

    try:
        parsed = parse_ollama_name(name)
    except ValueError:
        return []
    names = [parsed.short, name]
    if parsed.tag == "latest":
        names.append(parsed.short.removesuffix(":latest"))
    return names


@dataclass
class ServerState:
    backend: Backend
    """Where every endpoint's tokens come from."""
    model_names: list[str]
    """The served names; the first is the one answers report."""
    engine: Engine | None = None
    """The local engine behind ``backend`` (None when the backend is a remote server)."""
    backend_url: str | None = None
    """The remote server's URL (``--backend-url``), whose ``/get_load`` the metrics read."""
    backend_headers: dict[str, str] = field(default_factory=dict)
    """Headers for this server's own calls to ``backend_url`` (the backend's API key)."""
    sessions: SessionTable = field(default_factory=lambda: SessionTable(ttl_s=120,
                                                                        max_sessions=64))
    """The agents' sessions of chat requests with a ``session_id``
    (:mod:`agentrt.server.chat_sessions`)."""
    embedder: Any = None
    """The embedding model ``/v1/embeddings`` serves (None: the route answers a 404)."""
    metrics: ServerMetrics = field(init=False)

    def __post_init__(self) -> None:
        if not self.model_names:
            raise ValueError("a server needs at least one model name")
        self.metrics = ServerMetrics(self.engine, self.backend_url, self.backend_headers)

    @classmethod
    def of(cls, target: Engine | Backend, model_names: Sequence[str] = (), *,
           backend_url: str | None = None,
           sessions: SessionTable | None = None) -> ServerState:
        """The state of a server for ``target``: an engine (served through its local
        backend) or a backend."""
        from agentrt.backends import Backend, as_backend
        from agentrt.backends.sglang import SGLangBackend

        engine = None if isinstance(target, Backend) else target
        backend = as_backend(target)
        model = engine.config.model if engine is not None else backend.model_info.name
        headers = backend.headers if isinstance(backend, SGLangBackend) else {}
        state = cls(backend, list(model_names) or default_model_names(model or None),
                    engine=engine, backend_url=backend_url, backend_headers=headers)
        if sessions is not None:
            state.sessions = sessions
        return state

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    @property
    def max_model_len(self) -> int:
        """The longest sequence the backend holds (prompt + output)."""
        return self.backend.max_model_len

    @property
    def tokenizer(self) -> Any:
        """The served model's tokenizer."""
        return self.backend.tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added), as the served model reads it."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def compile_grammar(self, params: SamplingParams) -> None:
        """Compile ``params.grammar`` for the local engine in the calling (worker) thread; a
        ``ValueError`` if it does not compile (:meth:`Engine.compile_grammar`): queued from
        the event loop, the request then finds it compiled, so a slow compile (seconds for a
        long ``maxLength``) stalls no client's stream. Nothing for a remote backend."""
        if self.engine is not None:
            self.engine.compile_grammar(params)

    def local_engine(self, what: str) -> Engine:
        """The local engine, or a 501 saying that ``what`` needs one (a fronted backend)."""
        if self.engine is None:
            raise APIError(501, f"{what} is not available: this server fronts a "
                                f"{self.backend.name} backend (agentrt serve --backend), "
                                "ask that server directly", code="not_implemented")
        return self.engine

    def resolve_model(self, requested: str | None) -> str:
        """The served name ``requested`` means; a 404 ``model_not_found`` if none."""
        if requested is None or not requested.strip():
            return self.model_name
        wanted = {requested.lower(), requested.rsplit("/", 1)[-1].lower()}
        for name in self.model_names:
            if name.lower() in wanted or name.rsplit("/", 1)[-1].lower() in wanted:
                return self.model_name
        raise APIError(404, f"The model `{requested}` does not exist. This server serves: "
                            f"{', '.join(self.model_names)} (see GET /v1/models).",
                       param="model", code="model_not_found")


def get_state(request: Request) -> ServerState:
    """FastAPI dependency: the state of the app serving ``request``."""
    return request.app.state.agentrt


State = Annotated[ServerState, Depends(get_state)]
"""An endpoint parameter of this type receives the app's :class:`ServerState`."""
