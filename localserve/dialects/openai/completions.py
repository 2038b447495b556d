"""OpenAI legacy Completions: POST /v1/completions with a raw prompt, whole or streamed."""

from __future__ import annotations

from typing import Any

from ...engine.facade import EngineFacade
from ...generation import Chunk, Finished, GenerationOutput, GenerationRequest
from ...prompt.build import ChatModel, check_fits, check_grammar, tokenize_to_fit
from ..pump import sse
from ..exchange import Exchange
from ..services import Services
from .chat import ChatChunks, finish_reason, read_prediction, serve_openai, timings, usage
from ..fields import invalid, read_bool, read_int, read_sampling, read_stop


def handle(services: Services, exchange: Exchange) -> None:
    serve_openai(services, exchange, read_request, "cmpl-", final_response, CompletionChunks)


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
    raise invalid("prompt", "expected a string or an array of token ids")


def read_request(model: ChatModel, body: dict, request_id: str) -> GenerationRequest:
    if "prompt" not in body:
        raise invalid("prompt", "is required")
    tokens = read_prompt_tokens(model.engine, body["prompt"])
    if read_int(body, "n", low=1, default=1) != 1:
        raise invalid("n", "only n=1 is supported")
    if read_int(body, "best_of", low=1, default=1) != 1:
        raise invalid("best_of", "only best_of=1 is supported")
    if read_bool(body, "echo"):
        raise invalid("echo", "echo is not supported")
    if body.get("suffix"):
        raise invalid("suffix", "suffix (fill-in-the-middle) is not supported")
    logprobs = read_int(body, "logprobs", low=0, high=20)
    check_fits(model.engine, tokens)
    sampling = read_sampling(body, model.engine.n_vocab)
    check_grammar(model.engine, sampling)
    return GenerationRequest(
        prompt_tokens=tokens,
        sampling=sampling,
        max_tokens=read_int(body, "max_tokens", low=1, default=16),
        stop=read_stop(body),
        logprobs=logprobs is not None,
        top_logprobs=logprobs or 0,
        label=f"completion {request_id}",
        prediction=read_prediction(model.engine, body),     # an extension here, as in chat
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


def final_response(output: GenerationOutput, meta: dict, with_logprobs: bool) -> dict:
    choice = {"text": output.content, "index": 0,
              "logprobs": legacy_logprobs(output.logprobs) if with_logprobs else None,
              "finish_reason": finish_reason(output)}
    return {**meta, "object": "text_completion", "choices": [choice], "usage": usage(output),
            "system_fingerprint": None, "timings": timings(output)}


class CompletionChunks(ChatChunks):
    """Runtime events → text_completion frames: text only, and the same error and end."""

    def __init__(self, meta: dict, include_usage: bool):
        super().__init__(meta, include_usage)
        self.base = {**meta, "object": "text_completion", "system_fingerprint": None}
        self.text_offset = 0        # where the next entries' text begins, as the whole answer counts it

    def text(self, text: str, finish: str | None = None, logprobs: Any = None) -> bytes:
        return sse({**self.base, "choices": [{"text": text, "index": 0, "logprobs": logprobs,
                                              "finish_reason": finish}]})

    def feed(self, event: object) -> list[bytes]:
        if isinstance(event, Chunk):
            logprobs = legacy_logprobs(event.logprobs, self.text_offset)
            self.text_offset += sum(len(e["token"]) for e in event.logprobs or [])
            return [self.text(event.text, logprobs=logprobs)]
        if isinstance(event, Finished):
            out = [self.text("", finish_reason(event.output))]
            if self.include_usage:
                out.append(sse({**self.base, "choices": [], "usage": usage(event.output)}))
            return out
        return []

