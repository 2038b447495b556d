"""Which model a llama-server request without a body means: `?model=NAME` (a router's clients
send it), else the one model served, else (from a catalogue) the one loaded."""

from __future__ import annotations

from ...errors import ApiError
from ..services import Services


def named_model(services: Services, query: dict[str, str], path: str) -> str | None:
    """The model's name for use_model (None: the one model any name reaches); a 400 naming the
    choice when the catalogue has several and none or several are loaded."""
    name = query.get("model")
    if name is not None:
        return name
    models = services.ready()
    if models.catalogue.any_name:
        return None
    loaded = models.served_models()
    if len(loaded) == 1:
        return loaded[0].name
    names = ", ".join(models.catalogue.names())
    raise ApiError(400, f"this server serves several models ({names}) and {len(loaded) or 'none'} of them "
                        f"{'are' if len(loaded) > 1 else 'is'} loaded: name one as {path}?model=NAME",
                   param="model", code="missing_model")
