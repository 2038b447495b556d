"""Why models/ cannot serve a request, in its own words: no HTTP here.

The manager raises these from find(), use(), load() and unload(); dialects/failures.py gives
each kind its HTTP status (and Retry-After), and the route's ErrorShape renders it in the
dialect's own shape, as it does the runtime's failures.
"""

from __future__ import annotations


class ModelError(Exception):
    """A request the models cannot serve: `param` names the request's field to blame, `code`
    is the machine-readable reason the answer carries."""
    default_code: str | None = None
    default_param: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param if param is not None else self.default_param
        self.code = code if code is not None else self.default_code

    def again(self) -> ModelError:
        """A fresh copy: every request waiting for one load raises its own."""
        return type(self)(self.message, param=self.param, code=self.code)


class BadModelRequest(ModelError):
    """The request's model fields are wrong (`model` not a name, `keep_alive`, `num_ctx`)."""


class BadAdapter(BadModelRequest):
    """A LoRA adapter the model has not, or cannot run (models/adapters.py)."""
    default_code = "invalid_lora"
    default_param = "lora"


class UnknownModel(ModelError):
    """The request names no model of the catalogue."""
    default_code = "model_not_found"
    default_param = "model"


class ModelBusy(ModelError):
    """The model (or every model in the way of its load) is busy past --evict-wait: ask again shortly."""
    default_code = "model_busy"

    @classmethod
    def shortly(cls, message: str) -> ModelBusy:
        return cls(f"{message}; retry shortly")


class ModelTooLarge(ModelError):
    """The model alone needs more than --max-memory."""
    default_code = "model_too_large"


class ModelLoadFailed(ModelError):
    """llama.cpp or the model's configuration refused the load (the message names files by name alone)."""
    default_code = "model_load_failed"
