"""OpenAI Chat Completions: POST /v1/chat/completions, whole or streamed."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from .. import stored_defaults
from ..stored_defaults import StoredFields
from ...generation import (ChoiceEvent, Chunk, Finished, GenerationOutput, GenerationRequest, ToolCallDelta,
                           ToolCallStart)
from ...prompt.build import ChatInput, ChatModel, build_chat_request
from ...prompt.room import sent_roles
from ...engine.facade import TooManyTokens
from ...errors import ApiError
from .errors import openai_error_body
from ..limits import MAX_PREDICTION_TOKENS
from ..pump import DONE, PREFILL_COMMENT, StreamShape, sse
from ..request_cycle import Reply, serve_generation
from ..choices import read_choices
from ..job_events import error_from
from ..exchange import Exchange
from ..services import Services
from ..function_tools import function_definitions, openai_call_id, read_tool_choice
from .chat_input import read_messages
from ..failures import prompt_refusals
from ..fields import (invalid, read_bool, read_dict, read_int, read_sampling, read_stop, read_str,
                     read_template_kwargs)

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel


def handle(services: Services, exchange: Exchange) -> None:
    serve_openai(services, exchange, lambda model, body, request_id: read_request(model.chat, body, request_id),
                 "chatcmpl-", final_response, ChatChunks, stored=stored_defaults.CHAT)


def serve_openai(services: Services, exchange: Exchange, read, id_prefix: str, final, chunks,
                 param: str = "messages", stored: StoredFields | None = None) -> None:
    """What both OpenAI endpoints say in the request cycle: read(model, body, request id) for the
    job, final(each choice's Finished, meta, logprobs) for a whole answer, chunks(meta,
    include_usage, n) for a stream; `param`: the field a refused prompt names (the prompt's
    field). `n` choices run as jobs of their own (dialects/choices.py). `stored`: where the body
    takes a model's stored defaults."""
    def reply(model: ServedModel, body: dict) -> Reply:
        n = read_choices(body, model)
        with prompt_refusals(param):
            gen_request = read(model, body, exchange.request_id)
        include_usage = bool((read_dict(body, "stream_options") or {}).get("include_usage"))
        meta = {"id": id_prefix + uuid.uuid4().hex[:24], "created": int(time.time()), "model": model.model_id}
        return Reply(gen_request, shape=lambda gen: chunks(meta, include_usage, n),
                     whole=lambda output: final([Finished(output)], meta, gen_request.logprobs),
                     choices=n, choices_whole=lambda ends: final(ends, meta, gen_request.logprobs))

    serve_generation(exchange, services, reply, stored=stored)


def read_request(chat_model: ChatModel, body: dict, request_id: str) -> GenerationRequest:
    chat_model.fit_limit().check_turns(sent_roles(body.get("messages")))    # before reading them (prompt/room.py)
    messages = read_messages(body)
    max_tokens = read_int(body, "max_completion_tokens", low=1)
    if max_tokens is None:
        max_tokens = read_int(body, "max_tokens", low=1)
    logprobs = read_bool(body, "logprobs")
    top_logprobs = read_int(body, "top_logprobs", low=0, high=20, default=0)
    if top_logprobs and not logprobs:
        raise invalid("top_logprobs", "requires logprobs: true")
    chat = ChatInput(messages=messages, template_kwargs=read_template_kwargs(body))
    effort = read_str(body, "reasoning_effort")
    if effort is not None:
        chat.template_kwargs.setdefault("reasoning_effort", effort)
    chat.tools = function_definitions(body.get("tools"))
    chat.tool_choice = read_tool_choice(body.get("tool_choice"), chat.tools)
    chat.parallel_tool_calls = read_bool(body, "parallel_tool_calls", default=True)
    read_response_format(body, chat)
    sampling = read_sampling(body, chat_model.engine.n_vocab)
    cache_key = read_str(body, "prompt_cache_key")
    request = build_chat_request(chat_model, chat, sampling, max_tokens=max_tokens, stop=read_stop(body),
                                 logprobs=logprobs, top_logprobs=top_logprobs, label=f"chat {request_id}")
    request.cache_key = cache_key     # a slot-affinity hint (runtime/scheduler.choose_slot)
    request.prediction = read_prediction(chat_model.engine, body)
    return request


def read_prediction(engine, body: dict) -> str | None:
    """OpenAI's Predicted Outputs, {"type": "content", "content": text or text parts}: the text the
    answer is expected to repeat; the runtime drafts from it first (runtime/speculative.py)."""
    prediction = body.get("prediction")
    if prediction is None:
        return None
    if not isinstance(prediction, dict) or prediction.get("type") != "content":
        raise invalid("prediction", 'expected {"type": "content", "content": ...}')
    content = prediction.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in content):
            raise invalid("prediction.content", "expected a string or an array of text parts")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise invalid("prediction.content", "expected a string or an array of text parts")
    try:
        engine.tokenize(content, add_special=False, parse_special=False, limit=MAX_PREDICTION_TOKENS)
    except TooManyTokens:
        raise invalid("prediction.content", f"is longer than {MAX_PREDICTION_TOKENS} tokens") from None
    return content or None


def read_response_format(body: dict, chat: ChatInput) -> None:
    fmt = read_dict(body, "response_format")
    if not fmt:
        return
    kind = fmt.get("type")
    if kind == "text":
        return
    if kind == "json_object":
        chat.json_object = True
        return
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise invalid("response_format", "json_schema needs an object with a 'schema' object")
        chat.response_schema = spec.get("schema", {})
        return
    raise invalid("response_format", f"type must be text, json_object or json_schema; got {kind!r}")


# ---- shaping ------------------------------------------------------------------------

def usage(outputs: list[GenerationOutput]) -> dict:
    """The choices' usage summed; their one prompt counted once (as OpenAI counts `n`), and
    cached as far as every choice found it so (the first computed it). `audio_tokens`: the
    prompt's positions that its clips take (OpenAI's usage counts them so)."""
    prompt = outputs[0].prompt_tokens
    completion = sum(o.completion_tokens for o in outputs)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": min(o.cached_tokens for o in outputs),
                                  "audio_tokens": outputs[0].audio_tokens},
        "completion_tokens_details": {"reasoning_tokens": sum(o.reasoning_tokens for o in outputs),
                                      "accepted_prediction_tokens": sum(o.accepted_prediction_tokens
                                                                        for o in outputs),
                                      "rejected_prediction_tokens": sum(o.rejected_prediction_tokens
                                                                        for o in outputs)},
    }


def finish_reason(output: GenerationOutput) -> str:
    return "stop" if output.finish_reason == "cancelled" else output.finish_reason


def final_response(ends: list[Finished], meta: dict, with_logprobs: bool) -> dict:
    """The whole answer of the choices' ends (every one an output: a failed choice fails the
    request, choices.py)."""
    outputs = [end.output for end in ends]
    return {**meta, "object": "chat.completion",
            "choices": [chat_choice(output, index, with_logprobs) for index, output in enumerate(outputs)],
            "usage": usage(outputs), "system_fingerprint": None, "timings": timings(outputs)}


def chat_choice(output: GenerationOutput, index: int, with_logprobs: bool) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": output.content}
    if output.reasoning:
        message["reasoning_content"] = output.reasoning
    if output.tool_calls:
        message["tool_calls"] = [
            {"id": openai_call_id(c), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in output.tool_calls]
        if not output.content:
            message["content"] = None
    return {"index": index, "message": message, "finish_reason": finish_reason(output),
            "logprobs": {"content": output.logprobs or [], "refusal": None} if with_logprobs else None}


def timings(outputs: list[GenerationOutput]) -> dict:
    """llama-server's timings, of all the choices: prompt tokens each computed, tokens each
    generated; the times of the longest (they run side by side)."""
    decoded = sum(max(o.completion_tokens - 1, 0) for o in outputs)
    decode_ms = max(o.timings.decode_ms for o in outputs)
    return {
        "prompt_n": sum(o.prompt_tokens - o.cached_tokens for o in outputs),
        "prompt_ms": round(max(o.timings.prefill_ms for o in outputs), 3),
        "predicted_n": sum(o.completion_tokens for o in outputs),
        "predicted_ms": round(decode_ms, 3),
        "predicted_per_second": round(decoded / (decode_ms / 1000), 3) if decode_ms > 0 else None,
        "parked_ms": round(max(o.timings.parked_ms for o in outputs), 3),   # ours: time an editor completion held it back
        "draft_n": sum(o.timings.draft_n for o in outputs),       # speculative decoding, named as llama-server names them
        "draft_n_accepted": sum(o.timings.draft_n_accepted for o in outputs),
    }


class ChatChunks(StreamShape):
    """Runtime events → chat.completion.chunk frames (the pump writes them). With `n` choices the
    events are ChoiceEvents, every chunk carries one choice, each choice ends with its own finish
    chunk, and the usage chunk (summed) follows the last; a choice that fails ends the stream with
    its error event (the caller cancels the others)."""

    def __init__(self, meta: dict, include_usage: bool, choices: int = 1):
        self.base = {**meta, "object": "chat.completion.chunk", "system_fingerprint": None}
        self.include_usage = include_usage
        self.choices = choices
        self.role_sent: set[int] = set()
        self.ends: dict[int, Finished] = {}     # each choice's end, once it came
        self.failed = False

    @property
    def done(self) -> bool:
        """Every choice has ended, or one failed (the pump ends a stream of several choices here)."""
        return self.failed or len(self.ends) == self.choices

    def chunk(self, delta: dict, finish: str | None = None, logprobs: Any = None, index: int = 0,
              **extra: Any) -> bytes:
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs, **extra}
        return sse({**self.base, "choices": [choice]})

    def feed(self, event: object) -> list[bytes]:
        index, event = (event.index, event.event) if isinstance(event, ChoiceEvent) else (0, event)
        if isinstance(event, Finished) and event.error is not None:
            return self.finish(index, event)
        out = []
        if index not in self.role_sent and isinstance(event, (Chunk, ToolCallStart, Finished)):
            out.append(self.chunk({"role": "assistant", "content": ""}, index=index))
            self.role_sent.add(index)
        if isinstance(event, Chunk):
            key = "reasoning_content" if event.reasoning else "content"
            logprobs = {"content": event.logprobs, "refusal": None} if event.logprobs else None
            out.append(self.chunk({key: event.text}, logprobs=logprobs, index=index))
        elif isinstance(event, ToolCallStart):
            call = {"index": event.index, "id": openai_call_id(event), "type": "function",
                    "function": {"name": event.name, "arguments": ""}}
            out.append(self.chunk({"tool_calls": [call]}, index=index))
        elif isinstance(event, ToolCallDelta):
            out.append(self.chunk({"tool_calls": [{"index": event.index,
                                                   "function": {"arguments": event.fragment}}]}, index=index))
        elif isinstance(event, Finished):
            out += self.finish(index, event)
        return out

    def finish(self, index: int, end: Finished) -> list[bytes]:
        """A choice's finish chunk; after the last choice's, the usage. A failed choice: the
        stream's error event instead, and the stream is done."""
        if end.error is not None:
            self.failed = True
            return self.fail(error_from(end))
        self.ends[index] = end
        out = [self.chunk({}, self.finish_reason_of(end), index=index)]
        if self.done and self.include_usage:
            outputs = [self.ends[i].output for i in range(self.choices)]
            out.append(sse({**self.base, "choices": [], "usage": usage(outputs)}))
        return out

    def finish_reason_of(self, end: Finished) -> str:
        return finish_reason(end.output)

    def fail(self, error: ApiError) -> list[bytes]:
        # the SDKs raise on a data event that carries "error", in the shape of a whole error response
        return [sse(openai_error_body(error))]

    def keepalive(self) -> list[bytes]:
        return [PREFILL_COMMENT]

    def end(self) -> list[bytes]:
        return [DONE]

