"""POST /api/generate: a prompt completed, through the chat template or `raw`.

Not raw, the prompt is one user turn (after `system`, when given) rendered by the model's own
chat template, as Ollama renders it. Raw, the text goes to the model as it is. `template`
(a Go template in Ollama) is ignored with a log line: this server renders the model's own
Jinja template. `context` (deprecated: the tokens of an earlier answer) is ignored, and
answered as an empty list. `suffix` (fill-in-the-middle) is refused for now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import logging

from ...engine.facade import EngineFacade
from ...errors import ApiError
from ...generation import GenerationRequest
from ...prompt.build import (ChatInput, build_chat_request, check_fits, check_grammar, output_grammar,
                            tokenize_to_fit)
from ..exchange import Exchange
from ..fields import invalid, kind_of, read_bool, read_str
from .chat import run
from .lifecycle import load_or_unload
from .messages import read_chat
from .names import requested_name, serve_with_ollama_model
from .options import Options, read_format, read_options, read_stream, read_think, refuse_images, renamed
from .replies import Reply

if TYPE_CHECKING:
    from ...models.loaded import LoadedModel

log = logging.getLogger("localserve.dialects")


def handle(exchange: Exchange) -> None:
    exchange.app.require_ready()
    body = exchange.json()
    reply = Reply(requested_name(body), chat=False)
    stream = read_stream(body)
    think, level = read_think(body)
    prompt = read_str(body, "prompt", "")
    system = read_str(body, "system")
    raw = read_bool(body, "raw")
    read_format(body)
    refuse_images(body.get("images"), "images")
    if read_str(body, "suffix"):
        raise invalid("suffix", "fill-in-the-middle is not supported yet; send the prompt alone")
    if read_str(body, "template"):
        log.info("ollama generate %s: 'template' ignored: the model's own chat template renders the prompt",
                 exchange.request_id)
    context = body.get("context")
    if context is not None and not isinstance(context, list):
        raise invalid("context", f"expected an array of token ids, got {kind_of(context)}")
    if not prompt:
        load_or_unload(exchange, body, reply, stream)
        return
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    chat = read_chat({"format": body.get("format")}, think, level, messages)

    def answer(model: LoadedModel) -> None:
        reply.model_ready()
        options = read_options(body, model.chat.engine.n_vocab, f"ollama generate {exchange.request_id}")
        label = f"ollama generate {exchange.request_id}"
        try:
            if raw:
                request = raw_request(model.chat.engine, prompt, chat, options, label)
            else:
                request = build_chat_request(model.chat, chat, options.sampling, max_tokens=options.max_tokens,
                                             stop=options.stop, label=label)
        except ApiError as exc:
            raise renamed(exc, "format") if exc.param == "response_format" else exc from None
        run(exchange, request, reply, stream)

    serve_with_ollama_model(exchange, body, answer)


def raw_request(engine: EngineFacade, prompt: str, chat: ChatInput, options: Options, label: str) -> GenerationRequest:
    """The prompt's own tokens, no template; `format` still holds the answer to its grammar."""
    tokens = tokenize_to_fit(engine, prompt, add_special=True, parse_special=True)
    check_fits(engine, tokens)
    options.sampling.grammar = output_grammar(chat)
    check_grammar(engine, options.sampling, "format")
    return GenerationRequest(prompt_tokens=tokens, sampling=options.sampling, max_tokens=options.max_tokens,
                             stop=options.stop, label=label)
