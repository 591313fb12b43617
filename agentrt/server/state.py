"""What every endpoint shares: the one engine, the served model names, the metrics.

One :class:`agentrt.Engine` per server process; its continuous batching serves all clients.
A request's ``model`` must be one of the served names, but matching is lenient: case does
not matter, an ``org/`` prefix is ignored (``HuggingFaceTB/SmolLM2-135M-Instruct`` works),
the ``--model`` value as typed works too, and an omitted ``model`` means the served model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from agentrt import env
from agentrt.models import DEFAULT_MODEL
from agentrt.server.errors import APIError
from agentrt.server.metrics import ServerMetrics

if TYPE_CHECKING:
    from agentrt.engine.engine import Engine

__all__ = ["ServerState", "State", "default_model_names", "get_state"]


def default_model_names(model: str | None) -> list[str]:
    """The names a model is served under: its short name, then the ``--model`` value."""
    model = model or env.default_model()
    if model is None:
        return [DEFAULT_MODEL]
    short = Path(model.rstrip("/")).name.removesuffix(".gguf")
    return list(dict.fromkeys([short, model]))


@dataclass
class ServerState:
    engine: Engine
    model_names: list[str]
    """The served names; the first is the one answers report."""
    metrics: ServerMetrics = field(init=False)

    def __post_init__(self) -> None:
        if not self.model_names:
            raise ValueError("a server needs at least one model name")
        self.metrics = ServerMetrics(self.engine)

    @classmethod
    def of(cls, engine: Engine, model_names: Sequence[str] = ()) -> ServerState:
        return cls(engine, list(model_names) or default_model_names(engine.config.model))

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    @property
    def max_model_len(self) -> int:
        """The longest sequence the engine holds (prompt + output)."""
        return self.engine.core.max_model_len

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
