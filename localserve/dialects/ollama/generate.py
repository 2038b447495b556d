"""POST /api/generate: a prompt completed, through the chat template, `raw`, or as a hole to fill.

Not raw, the prompt is one user turn (after `system`, when given) rendered by the model's own
chat template, as Ollama renders it. Raw, the text goes to the model as it is; raw text in
the model's own FIM layout (Twinny sends it so) is an editor's completion, as one with a
suffix is: it parks a long chat, and a newer one from the same client cancels it. With a
`suffix`, the prompt is the text before the hole and the suffix the text after it: the
model's fill-in-the-middle prompt (dialects/fim.py; a 400 for a model without FIM tokens),
`system` and `raw` aside as Ollama leaves them. `template` (a Go template in Ollama) is
ignored with a log line: this server renders the model's own Jinja template. `images`
(base64; an audio clip among them by its bytes, as in chat) go with the prompt's user turn (not raw, no
suffix). `context`
(deprecated: the tokens of an earlier answer) is ignored, and answered as an empty list.
A prompt too long for the context is cut in the middle unless `truncate` or `shift` is false,
and an answer that reaches the context's end goes on unless `shift` is false (truncation.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from ...conversation import Message, Text, text_message
from ...engine.facade import EngineFacade
from ...generation import GenerationRequest
from ...prompt.build import (ChatInput, build_chat_request, check_fits, check_grammar, output_grammar, tokenize_capped,
                             tokenize_to_fit)
from ...prompt.fim import FimInput
from ..exchange import Exchange
from ..fields import invalid, kind_of, read_bool, read_str
from ..fim import fills_the_middle, fim_prompt, writes_its_own_fim
from ..services import Services
from .chat import serve_ollama, shifting
from .lifecycle import load_or_unload
from .messages import read_chat, read_images
from .names import requested_name
from .options import Options, read_format, read_stream, read_think
from .replies import Answer
from .stored import apply_stored
from .truncation import cut_to_fit, prompt_keep

if TYPE_CHECKING:
    from ...models.served import ServedModel

log = logging.getLogger("localserve.dialects")


def handle(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    body = exchange.json()
    answer = Answer(requested_name(body), chat=False)
    apply_stored(models, body, chat=False)
    think, level = read_think(body)
    prompt = read_str(body, "prompt", "")
    suffix = read_str(body, "suffix", "")
    system = read_str(body, "system")
    raw = read_bool(body, "raw")
    truncate = read_bool(body, "truncate", default=True)
    shift = read_bool(body, "shift", default=True)
    read_format(body)
    images = read_images(body.get("images"), "images")
    if images and (raw or suffix):
        raise invalid("images", "images go through the chat template: not with raw or a suffix")
    if read_str(body, "template"):
        log.info("ollama generate %s: 'template' ignored: the model's own chat template renders the prompt",
                 exchange.request_id)
    context = body.get("context")
    if context is not None and not isinstance(context, list):
        raise invalid("context", f"expected an array of token ids, got {kind_of(context)}")
    if not prompt and not suffix:
        load_or_unload(services, exchange, body, answer, read_stream(body))
        return
    messages = ([text_message("system", system)] if system else []) + [Message("user", (*images, Text(prompt)))]
    chat = read_chat({"format": body.get("format")}, think, level, messages)
    label = f"ollama generate {exchange.request_id}"

    def build(model: ServedModel, options: Options) -> GenerationRequest:
        engine = model.chat.engine
        keep = prompt_keep(options.num_keep, len(engine.prompt_start))
        # a prompt too long for the context: cut in the middle with truncate and shift (truncation.py)
        cut = partial(cut_to_fit, n_ctx=engine.n_ctx, keep=keep) if truncate and shift else None
        if suffix:
            return fill_request(model, prompt, suffix, chat, options, label)      # an editor's: never shifted
        if raw:
            return shifting(raw_request(engine, prompt, chat, options, label, cut), shift, keep, engine.n_ctx)
        return shifting(build_chat_request(model.chat, chat, options.sampling, max_tokens=options.max_tokens,
                                           stop=options.stop, label=label, cut=cut), shift, keep,
                        engine.n_ctx)

    serve_ollama(services, exchange, answer, label, build, "prompt")


def raw_request(engine: EngineFacade, prompt: str, chat: ChatInput, options: Options, label: str,
                cut: Callable[[list[int]], list[int]] | None = None) -> GenerationRequest:
    """The prompt's own tokens, no template; `format` still holds the answer to its grammar. A
    prompt in the model's FIM layout (Twinny's, Continue's fallback) fills a hole as a `suffix` does.
    `cut`: makes a prompt longer than the context fit (else it is ContextOverflow)."""
    if cut is None:
        tokens = tokenize_to_fit(engine, prompt, add_special=True, parse_special=True)
    else:
        tokens = tokenize_capped(engine, prompt, "prompt", add_special=True, parse_special=True)
        if len(tokens) >= engine.n_ctx:
            tokens = cut(tokens)
    check_fits(engine, tokens)
    request = tokens_request(engine, tokens, chat, options, label)
    if writes_its_own_fim(engine, tokens):
        fills_the_middle(engine, request)
    return request


def fill_request(model: ServedModel, prefix: str, suffix: str, chat: ChatInput, options: Options,
                 label: str) -> GenerationRequest:
    """The model's fill-in-the-middle prompt for the text around the hole; the answer ends
    where the model would start another FIM section."""
    engine = model.chat.engine
    tokens = fim_prompt(engine, model.model_id, FimInput(prefix=prefix, suffix=suffix), "suffix")
    check_fits(engine, tokens)
    request = tokens_request(engine, tokens, chat, options, label)
    fills_the_middle(engine, request)
    return request


def tokens_request(engine: EngineFacade, tokens: list[int], chat: ChatInput, options: Options,
                   label: str) -> GenerationRequest:
    if options.sampling.grammar:        # llama.cpp's own `grammar` option, as build_chat_request takes it
        check_grammar(engine, options.sampling, "options.grammar")
    else:
        options.sampling.grammar = output_grammar(chat)
        check_grammar(engine, options.sampling, "format")
    return GenerationRequest(prompt_tokens=tokens, sampling=options.sampling, max_tokens=options.max_tokens,
                             stop=options.stop, label=label)
