"""POST /api/chat: Ollama's chat, streamed as NDJSON (the default) or whole."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ApiError
from ...generation import GenerationRequest
from ...prompt.build import build_chat_request
from ..exchange import Exchange
from ..pump import stream_job
from ..respond import cancel_on_error, submit, wait_for_output
from .lifecycle import load_or_unload
from .messages import read_chat, read_messages
from .names import requested_name, serve_with_ollama_model
from .options import read_options, read_stream, read_think, renamed
from .replies import NdjsonLines, Reply

if TYPE_CHECKING:
    from ...models.loaded import LoadedModel


def handle(exchange: Exchange) -> None:
    exchange.app.require_ready()
    body = exchange.json()
    reply = Reply(requested_name(body), chat=True)
    stream = read_stream(body)
    think, level = read_think(body)
    if not body.get("messages"):
        if body.get("messages") not in (None, []):
            read_messages(body["messages"])      # the 400 for a messages that is not an array
        load_or_unload(exchange, body, reply, stream)
        return
    messages = read_messages(body["messages"])
    chat = read_chat(body, think, level, messages)

    def answer(model: LoadedModel) -> None:
        reply.model_ready()
        options = read_options(body, model.chat.engine.n_vocab, f"ollama chat {exchange.request_id}")
        try:
            request: GenerationRequest = build_chat_request(model.chat, chat, options.sampling,
                                                            max_tokens=options.max_tokens, stop=options.stop,
                                                            label=f"ollama chat {exchange.request_id}")
        except ApiError as exc:
            raise renamed(exc, "format") if exc.param == "response_format" else exc from None
        run(exchange, request, reply, stream)

    serve_with_ollama_model(exchange, body, answer)


def run(exchange: Exchange, request: GenerationRequest, reply: Reply, stream: bool) -> None:
    """Submit the job and answer: NDJSON lines through the pump, or one object."""
    gen = submit(exchange, request)
    with cancel_on_error(gen):
        if stream:
            stream_job(exchange, NdjsonLines(reply), gen)
        else:
            exchange.send_json(reply.whole(wait_for_output(exchange, gen)))
