"""What the fill-in-the-middle routes share (/infill, Completions' `suffix`, Ollama's `suffix`):
the prompt through prompt/fim.py with its 400 for a model that cannot fill a hole, and an
editor's habit of asking again at every keystroke.

An editor sends a new completion as the user types on; the one before it is then worthless.
llama.vim kills its curl (the closed socket cancels the job), but a client that keeps its
connection or its HTTP library's pool may not. So a completion cancels the older one still
running from the same client, on the same route, and that answer says so (each dialect's
cancelled shape). "The same client" is what the client names in its X-Client-Id header, and
nothing weaker: two vims, or two scripts on one SDK, send the same User-Agent, and one must not
cut the other off. Without the header a completion is never superseded: only a newer request on
its own keep-alive connection would surely be its client's, and a connection's requests are
answered in turn, so its older completion has ended by then (one that closes its connection, as
llama.vim does, cancels the job anyway). A warm-up (n_predict 0) takes no part: it must neither
cancel a completion nor be cancelled by one.

Editor priority (runtime/fairness.py) is shared per client too, and there a guess may stand in:
the User-Agent groups what sends no X-Client-Id, since sharing a share only orders work, never
cancels any.
"""

from __future__ import annotations

import contextlib
import threading

from ..engine.facade import EngineFacade
from ..errors import ApiError
from ..generation import ActiveGeneration, GenerationRequest
from ..prompt.fim import FimInput, NoFimTokens, build_fim_prompt, fim_stop_strings
from .exchange import Exchange

SUPERSEDED = "superseded by a newer completion from the same client"


def fim_prompt(engine: EngineFacade, model_id: str, fim_input: FimInput, param: str) -> list[int]:
    """The FIM prompt's tokens; 400 naming the model when it has no FIM tokens."""
    try:
        return build_fim_prompt(engine, fim_input)
    except NoFimTokens as exc:
        raise ApiError(400, f"model '{model_id}' cannot fill in the middle: {exc}", param=param,
                       code="model_not_supported") from None


def writes_its_own_fim(engine: EngineFacade, tokens: list[int]) -> bool:
    """A prompt the client laid out in the model's FIM format itself (Continue's OpenAI provider
    renders its own template into a plain Completions prompt; Twinny and Continue's fallback
    send one raw to Ollama's /api/generate): it holds the middle token."""
    return engine.fim.mid is not None and engine.fim.mid in tokens


def fills_the_middle(engine: EngineFacade, request: GenerationRequest) -> None:
    """The request fills a hole, with a FIM prompt built here or one the client wrote itself:
    its answer ends where the model would start another FIM section (fim_stop_strings; pad,
    repository and file separator are end-of-generation tokens already), and it is an editor's
    completion (it parks a long chat; a newer one from the same client cancels it)."""
    request.stop = request.stop + fim_stop_strings(engine)     # a new list: the caller may keep the old
    request.editor_completion = True


def supersede_key(exchange: Exchange, request: GenerationRequest) -> str | None:
    """The key under which a newer completion cancels this one, and this one its older one: its
    route, X-Client-Id and API key (one key's client never cancels another's); None (no part) for a request that is no editor completion, a warm-up,
    or one that names no client (see the module's comment)."""
    who = exchange.request.header("x-client-id")
    if not who or not request.editor_completion or request.max_tokens == 0:
        return None
    return f"{exchange.scope.owner} {exchange.request.path} {who}"


def priority_client(exchange: Exchange) -> str | None:
    """Whom an editor completion's share of preemptions counts for (see the module's comment)."""
    who = exchange.request.header("x-client-id")
    if who:
        return f"id {who}"
    agent = exchange.request.header("user-agent")
    return f"agent {agent}" if agent else None


class LatestPerClient:
    """Each client's running completion; a newer one cancels it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: dict[str, ActiveGeneration] = {}

    def start(self, key: str, gen: ActiveGeneration) -> None:
        with self._lock:
            older = self._running.get(key)
            self._running[key] = gen
        if older is not None and older is not gen:
            older.cancel(SUPERSEDED)

    def end(self, key: str, gen: ActiveGeneration) -> None:
        with self._lock:
            if self._running.get(key) is gen:
                del self._running[key]


LATEST = LatestPerClient()


@contextlib.contextmanager
def superseding(key: str | None, gen: ActiveGeneration):
    """Around a completion's life: it cancels its client's older one, and a newer one cancels it
    (`key`: supersede_key's; None takes no part)."""
    if key is None:
        yield
        return
    LATEST.start(key, gen)
    try:
        yield
    finally:
        LATEST.end(key, gen)
