"""OpenAI legacy Completions: POST /v1/completions with a raw prompt, whole or streamed."""

from __future__ import annotations

from typing import Any

from .. import stored_defaults
from ...engine.facade import EngineFacade
from ...generation import ChoiceEvent, Chunk, Finished, GenerationOutput, GenerationRequest
from ...prompt.build import ChatModel, check_fits, check_grammar, tokenize_to_fit
from ...prompt.fim import FimInput
from .completion_images import is_object_prompt, read_object_prompt
from ..fim import fills_the_middle, fim_prompt, writes_its_own_fim
from ..pump import sse
from ..exchange import Exchange
from ..services import Services
from .chat import ChatChunks, finish_reason, read_prediction, serve_openai, timings, usage
from ..fields import invalid, read_bool, read_int, read_sampling, read_stop, read_str


def handle(services: Services, exchange: Exchange) -> None:
    echoed: list[str] = []          # the prompt's text, when the request asks for it back (echo)

    def read(model, body: dict, request_id: str) -> GenerationRequest:
        request, echo = read_completion(model.chat, model.model_id, body, request_id)
        echoed.append(echo)
        return request

    def final(ends: list[Finished], meta: dict, with_logprobs: bool) -> dict:
        return final_response(ends, meta, with_logprobs, echoed[0])

    def chunks(meta: dict, include_usage: bool, n: int) -> CompletionChunks:
        return CompletionChunks(meta, include_usage, echoed[0], n)

    serve_openai(services, exchange, read, "cmpl-", final, chunks, param="prompt", stored=stored_defaults.COMPLETIONS)


def read_prompt_tokens(engine: EngineFacade, prompt: Any) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]          # a batch of one
    if isinstance(prompt, str):
        tokens = tokenize_to_fit(engine, prompt, add_special=True, parse_special=True)
        if not tokens:      # this model adds no BOS: there is nothing to continue from
            raise invalid("prompt", "is empty; give at least one character or token to continue from")
        return tokens
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not engine.valid_token(t)]
        if bad:
            raise invalid("prompt", f"token id {bad[0]} is outside the vocabulary")
        return list(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise invalid("prompt", "only one prompt per request is supported")
    raise invalid("prompt", "expected a string, an array of token ids, or an object with prompt_string "
                            "and multimodal_data (images)")


def read_completion(chat_model: ChatModel, model_id: str, body: dict, request_id: str) -> tuple[GenerationRequest, str]:
    """The job, and the text `echo` puts before the answer: the prompt (OpenAI's echo returns the
    prompt; a suffix is not part of it, so it is not echoed)."""
    if "prompt" not in body:
        raise invalid("prompt", "is required")
    suffix = read_str(body, "suffix")
    images = []
    if suffix:          # an empty suffix is no hole: the prompt is continued as it is
        tokens, prompt_text = read_fim_prompt(chat_model, model_id, body["prompt"], suffix)
    elif is_object_prompt(body["prompt"]):      # llama-server's {prompt_string, multimodal_data}
        multimodal = read_object_prompt(chat_model, body["prompt"],
                                        lambda text: read_prompt_tokens(chat_model.engine, text))
        tokens, images, prompt_text = multimodal.tokens, multimodal.images, multimodal.text
    else:
        tokens = read_prompt_tokens(chat_model.engine, body["prompt"])
        prompt_text = None
    echo = read_bool(body, "echo")
    if echo and read_int(body, "logprobs", low=0, high=20) is not None:
        raise invalid("echo", "echo with logprobs (the prompt's own logprobs) is not supported")
    request = read_request(chat_model, body, request_id, tokens)
    request.images = images
    if suffix or writes_its_own_fim(chat_model.engine, tokens):
        fills_the_middle(chat_model.engine, request)
    if not echo:
        return request, ""
    return request, prompt_text if prompt_text is not None else _prompt_text(chat_model.engine, body["prompt"], tokens)


def read_fim_prompt(chat_model: ChatModel, model_id: str, prompt: Any, suffix: str) -> tuple[list[int], str]:
    """The fill-in-the-middle prompt for a text prompt (the prefix) and its suffix."""
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise invalid("prompt", "with a suffix, expected a string (the text before the insertion)")
    tokens = fim_prompt(chat_model.engine, model_id, FimInput(prefix=prompt, suffix=suffix), "suffix")
    check_fits(chat_model.engine, tokens)
    return tokens, prompt


def _prompt_text(engine: EngineFacade, prompt: Any, tokens: list[int]) -> str:
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else engine.detokenize(tokens)


def read_request(chat_model: ChatModel, body: dict, request_id: str, tokens: list[int]) -> GenerationRequest:
    """The job for these prompt tokens and the body's other fields."""
    if read_int(body, "best_of", low=1, default=1) != 1:
        raise invalid("best_of", "only best_of=1 is supported")
    logprobs = read_int(body, "logprobs", low=0, high=20)
    check_fits(chat_model.engine, tokens)
    sampling = read_sampling(body, chat_model.engine.n_vocab)
    check_grammar(chat_model.engine, sampling)
    return GenerationRequest(
        prompt_tokens=tokens,
        sampling=sampling,
        max_tokens=read_int(body, "max_tokens", low=1, default=16),
        stop=read_stop(body),
        logprobs=logprobs is not None,
        top_logprobs=logprobs or 0,
        label=f"completion {request_id}",
        prediction=read_prediction(chat_model.engine, body),     # an extension here, as in chat
    )


def legacy_logprobs(entries: list[dict] | None, offset: int = 0) -> dict | None:
    """The legacy shape of entries whose text begins `offset` characters into the answer."""
    if entries is None:
        return None
    offsets = []
    for entry in entries:
        offsets.append(offset)
        offset += len(entry["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        "text_offset": offsets,
    }


def completion_finish(output: GenerationOutput) -> str:
    """Chat's finish reasons, but a cancelled answer says so: a client is still there to read it
    when a newer completion of its editor superseded this one (dialects/fim.py)."""
    return "cancelled" if output.finish_reason == "cancelled" else finish_reason(output)


def final_response(ends: list[Finished], meta: dict, with_logprobs: bool, echo: str = "") -> dict:
    """The whole answer of the choices' ends, each choice's text after the echoed prompt."""
    outputs = [end.output for end in ends]     # every one an output: a failed choice fails the request
    choices = [{"text": echo + output.content, "index": index,
                "logprobs": legacy_logprobs(output.logprobs) if with_logprobs else None,
                "finish_reason": completion_finish(output)} for index, output in enumerate(outputs)]
    return {**meta, "object": "text_completion", "choices": choices, "usage": usage(outputs),
            "system_fingerprint": None, "timings": timings(outputs)}


class CompletionChunks(ChatChunks):
    """Runtime events → text_completion frames: text only, and the same error and end; each
    choice's text starts with the echoed prompt (a choice that fails sends none of it)."""

    def __init__(self, meta: dict, include_usage: bool, echo: str = "", choices: int = 1):
        super().__init__(meta, include_usage, choices)
        self.base = {**meta, "object": "text_completion", "system_fingerprint": None}
        self.text_offsets: dict[int, int] = {}  # where each choice's next entries' text begins, as its whole answer counts it
        self.echo = echo            # the prompt's text, sent first in each choice

    def feed(self, event: object) -> list[bytes]:
        index, event = (event.index, event.event) if isinstance(event, ChoiceEvent) else (0, event)
        if isinstance(event, Finished) and event.error is not None:
            return self.finish(index, event)
        first = [self.text(self.echo, index=index)] if self.echo and index not in self.text_offsets else []
        self.text_offsets.setdefault(index, 0)
        return first + self._frames(index, event)

    def text(self, text: str, finish: str | None = None, logprobs: Any = None, index: int = 0, **extra: Any) -> bytes:
        return sse({**self.base, "choices": [{"text": text, "index": index, "logprobs": logprobs,
                                              "finish_reason": finish, **extra}]})

    def _frames(self, index: int, event: object) -> list[bytes]:
        if isinstance(event, Chunk):
            logprobs = legacy_logprobs(event.logprobs, self.text_offsets[index])
            self.text_offsets[index] += sum(len(e["token"]) for e in event.logprobs or [])
            return [self.text(event.text, logprobs=logprobs, index=index)]
        if isinstance(event, Finished):
            return self.finish(index, event)
        return []

    def chunk(self, delta: dict, finish: str | None = None, logprobs: Any = None, index: int = 0,
              **extra: Any) -> bytes:
        """ChatChunks' finish chunk, as text (its delta is always empty here)."""
        return self.text("", finish, logprobs, index, **extra)

    def finish_reason_of(self, end: Finished) -> str:
        return completion_finish(end.output)
