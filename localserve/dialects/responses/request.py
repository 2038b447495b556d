"""POST /v1/responses: the request body read into a Plan — a GenerationRequest plus the
Response object to fill in, the input items to store and the conversation to extend.

Validation follows the API, with the original router's extra rules: `stream` with
`background`, and `previous_response_id` with `conversation`, are 400s. Context comes from
the store: a previous response's chain, or a conversation's items, goes before the input.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..choices import refuse_choices
from ...errors import ApiError
from ..limits import MAX_PROMPT_ITEMS
from ...generation import ContextOverflow, GenerationRequest, PromptRefused, SamplingParams
from ...prompt.build import ChatInput, ChatModel, build_chat_request
from ..failures import api_error, context_overflow
from ..compaction import CompactionUsage
from ..signing import seal, unseal
from ...store.store import Store, new_id
from ..fields import invalid, read_bool, read_dict, read_int, read_sampling, read_stop, read_str, \
    read_template_kwargs
from .runs import ACTIVE
from .compacting import ContextManagement, open_compactions, read_context_management, since_last_compaction, \
    split_trigger
from .items import DecodedImages, cut_points, read_input, to_messages, unsupported
from .tools import ToolKind, constrain, read_tool_choice, read_tools

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES = ("auto", "concise", "detailed")
TRUNCATIONS = ("auto", "disabled")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
ENCRYPTED_REASONING_INCLUDE = "reasoning.encrypted_content"


@dataclass
class Plan:
    response: dict                    # the Response object, status and output still to come
    generation: GenerationRequest | None   # None until compacted (below)
    input_items: list[dict]           # this request's own input, normalized, with ids
    request: dict                     # the body, as stored beside the response
    stream: bool = False
    background: bool = False
    store: bool = True
    conversation_id: str | None = None
    summary: bool = False             # reasoning as summary parts, else reasoning_text parts
    parallel_tool_calls: bool = True
    logprobs: bool = False
    tool_kinds: dict[str, ToolKind] = dataclasses.field(default_factory=dict)
    ignored_tools: list[str] = dataclasses.field(default_factory=list)   # hosted tool types left out
    seal: Any = None                  # seals reasoning text into encrypted_content, when included
    # Compaction (compacting.py): a compaction_trigger makes the response a compaction; a
    # threshold or truncation "auto" may compact before the model runs. generation is None
    # until then when the response is a compaction, or its input did not fit.
    triggered: bool = False
    images: DecodedImages = dataclasses.field(default_factory=dict)    # the input's, decoded as it was read
    management: ContextManagement = dataclasses.field(default_factory=ContextManagement)
    truncation: str = "disabled"
    chat: ChatInput | None = None     # the tools and options, for a compaction of `rendered`
    rendered: list[dict] = dataclasses.field(default_factory=list)    # context + input, opened
    n_context: int = 0                # where this request's own input starts in rendered
    rebuild: Callable[[list[dict], str], GenerationRequest] | None = None    # items, truncation → request
    compaction: dict | None = None    # the compaction item the output opens with, once compacted
    compaction_usage: CompactionUsage | None = None     # the tokens the compaction took
    seal_compaction: Callable[[str], dict] | None = None     # a summary → its compaction item


@dataclass
class TurnInput:
    """A request's `input` and the stored context that goes before it (since its last compaction),
    as a response and a compaction both read them."""
    read: list[dict]                  # the input items as read, a compaction trigger included
    items: list[dict]                 # the input less its trigger
    triggered: bool                   # the input ends in a compaction_trigger
    context: list[dict]
    images: DecodedImages             # decoded as the input is read, not again when it is rendered

    def opened(self, key: bytes) -> list[dict]:
        """Context, then input, with their reasoning and compaction blobs unsealed."""
        return open_compactions(key, open_reasoning(key, self.context, "previous_response_id"),
                                "previous_response_id") + \
            open_compactions(key, open_reasoning(key, self.read, "input"), "input")


def read_turn(body: dict, store: Store | None, previous_id: str | None, conversation_id: str | None) -> TurnInput:
    """The input and its stored context; a 400 when both are empty."""
    images: DecodedImages = {}
    sent = body.get("input", [])
    if isinstance(sent, list):          # counted before they are read: reading 200,000 items is seconds
        counted = sum(not (isinstance(item, dict) and item.get("type") == "compaction_trigger") for item in sent)
        if counted > MAX_PROMPT_ITEMS:
            raise too_many_items(counted, 0)
    read = read_input(sent, images=images)      # rendered as read (split_trigger)
    items, triggered = split_trigger(read)
    context = since_last_compaction(context_items(store, previous_id, conversation_id))
    if not items and not context:
        raise invalid("input", "expected a string or a non-empty array of input items")
    return TurnInput(read, items, triggered, context, images)


def too_many_items(items: int, context: int) -> ApiError:
    return ApiError(400, f"invalid 'input': {items} input items and {context} of stored context are more than "
                         f"the {MAX_PROMPT_ITEMS} one response may render (MAX_PROMPT_ITEMS)",
                    param="input", code="too_many_items")


def storage_off(what: str) -> ApiError:
    return ApiError(400, f"{what} needs stored state, but storage is off on this server (--no-store)",
                    param=None, code="storage_disabled")


def read_plan(body: dict, request_id: str, *, chat_model: ChatModel, model_id: str, signing_key: bytes,
              store: Store | None, check_client: Callable[[], None] = lambda: None) -> Plan:
    """check_client raises ClientGone once the client has left: a long build stops then."""
    stream = read_bool(body, "stream")
    background = read_bool(body, "background")
    if stream and background:
        raise ApiError(400, "stream and background cannot both be true; set one of them to false",
                       param="background", code="incompatible_parameters")
    previous_id = read_str(body, "previous_response_id")
    conversation_id = read_conversation_id(body)
    if previous_id and conversation_id:
        raise ApiError(400, "previous_response_id and conversation are mutually exclusive; give only one",
                       param="previous_response_id", code="mutually_exclusive_parameters")
    stored = read_bool(body, "store", default=True)
    if store is None:
        for name, used in (("background", background), ("previous_response_id", previous_id),
                           ("conversation", conversation_id)):
            if used:
                raise storage_off(name)
        stored = False
    if background and not stored:
        raise invalid("background", "a background response must be stored; set store to true")
    refuse_choices(body, "Unknown parameter: 'n'. A response has one output; ask /v1/chat/completions for "
                         "several choices")
    if body.get("prompt") is not None:
        raise unsupported("prompt", "stored prompt templates are not supported; send input and instructions")

    instructions = read_str(body, "instructions")
    turn = read_turn(body, store, previous_id, conversation_id)
    read, items, triggered, context, images = turn.read, turn.items, turn.triggered, turn.context, turn.images
    if len(items) + len(context) > MAX_PROMPT_ITEMS:
        raise too_many_items(len(items), len(context))
    check_client()

    tools = read_tools(body)
    choice, choice_echo = read_tool_choice(body.get("tool_choice"), tools)
    constrain(tools, choice)
    parallel = read_bool(body, "parallel_tool_calls", default=True)
    chat = ChatInput(messages=[], tools=tools.definitions, tool_choice=choice, parallel_tool_calls=parallel,
                     template_kwargs=read_template_kwargs(body))
    text_echo = read_text_format(body, chat)
    reasoning = read_reasoning(body, chat)
    include = read_include(body)
    logprobs = LOGPROBS_INCLUDE in include
    top_logprobs = read_int(body, "top_logprobs", low=0, high=20, default=0)
    max_output = read_int(body, "max_output_tokens", low=1)
    truncation = read_str(body, "truncation", "disabled", choices=TRUNCATIONS)
    sampling = read_sampling(body, chat_model.engine.n_vocab)
    metadata = read_metadata(body)
    read_dict(body, "client_metadata")   # accepted (Codex sends it); it has no effect here
    cache_key = read_str(body, "prompt_cache_key")

    management = read_context_management(body)
    rendered = turn.opened(signing_key)
    stop = read_stop(body)

    def rebuild(kept: list[dict], truncation_mode: str) -> GenerationRequest:
        generation = build_prompt(chat_model, kept, instructions, chat, sampling, truncation=truncation_mode,
                                  check_client=check_client, inputs=min(len(read), len(kept)), images=images,
                                  max_tokens=max_output,
                                  stop=stop, logprobs=logprobs,
                                  top_logprobs=top_logprobs, label=f"responses {request_id}")
        if generation.tools is not None:
            # Collect every call the model makes: with parallel_tool_calls false a second call
            # fails the response rather than being silently dropped (the original's rule).
            generation.tools.parallel = True
        generation.cache_key = cache_key
        return generation

    compacting = management.compact_threshold is not None or truncation == "auto"
    generation = None
    if not triggered:
        try:
            generation = rebuild(rendered, "disabled" if compacting else truncation)
        except ApiError as error:
            if not compacting or error.code != "context_length_exceeded":
                raise
    response = {
        "id": new_id("resp"), "object": "response", "created_at": int(time.time()),
        "status": "queued" if background else "in_progress", "background": background,
        "completed_at": None, "conversation": {"id": conversation_id} if conversation_id else None,
        "error": None, "incomplete_details": None, "instructions": instructions,
        "max_output_tokens": max_output, "max_tool_calls": None, "model": model_id, "output": [],
        "parallel_tool_calls": parallel, "previous_response_id": previous_id, "prompt_cache_key": None,
        "reasoning": reasoning, "safety_identifier": None, "service_tier": "default", "store": stored,
        "temperature": sampling.temperature, "text": text_echo, "tool_choice": choice_echo,
        "tools": tools.echo, "top_logprobs": top_logprobs, "top_p": sampling.top_p,
        "truncation": truncation, "usage": None, "user": None, "metadata": metadata,
    }
    for name in ("user", "safety_identifier"):    # accepted and echoed, no effect
        response[name] = read_str(body, name)
    response["prompt_cache_key"] = cache_key     # a slot-affinity hint (runtime/scheduler.choose_slot)
    return Plan(response=response, generation=generation, input_items=items, request=body, stream=stream,
                background=background, store=stored, conversation_id=conversation_id,
                summary=reasoning["summary"] is not None, parallel_tool_calls=parallel, logprobs=logprobs,
                tool_kinds=tools.kinds, ignored_tools=tools.ignored,
                seal=_sealer(signing_key) if ENCRYPTED_REASONING_INCLUDE in include else None,
                triggered=triggered, images=images, management=management, truncation=truncation, chat=chat, rendered=rendered,
                n_context=len(context), rebuild=rebuild)


def _sealer(key: bytes):
    return lambda text: seal(key, text)


def open_reasoning(key: bytes, items: list[dict], param: str) -> list[dict]:
    """Items to render: a reasoning item that carries encrypted_content renders the text sealed
    in it, exactly as it was generated. In `input`, a blob this server did not seal, or that
    was altered, is a 400 (as OpenAI refuses one it cannot decrypt); stored context keeps the
    reasoning text it was stored with."""
    out = []
    for i, item in enumerate(items):
        if item["type"] == "reasoning" and "encrypted_content" in item:
            text = unseal(key, item["encrypted_content"])
            if text is None and param != "input":
                out.append(item)    # stored context: its own reasoning text renders instead
                continue
            if text is None:
                where = f"{param}[{i}].encrypted_content" if param == "input" else param
                raise ApiError(400, f"invalid '{where}': the encrypted content could not be verified or "
                                    f"decrypted; it was not produced by this server (or its key changed) or "
                                    f"it was altered", param=where, code="invalid_encrypted_content")
            item = {**item, "content": [{"type": "reasoning_text", "text": text}]}
        out.append(item)
    return out


def read_conversation_id(body: dict) -> str | None:
    value = body.get("conversation")
    if isinstance(value, dict):
        value = value.get("id")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise invalid("conversation", "expected a conversation id or an object with an 'id'")
    return value


def context_items(store: Store | None, previous_id: str | None, conversation_id: str | None) -> list[dict]:
    """What goes before the input: the previous response's chain, or the conversation (both
    need the store: read_plan refuses them without one)."""
    if previous_id:
        previous = store.get_response(previous_id)
        if previous is None:
            raise ApiError(404, f"previous response '{previous_id}' not found", param="previous_response_id",
                           code="previous_response_not_found")
        if previous["status"] in ACTIVE:
            raise ApiError(400, f"previous response '{previous_id}' is still {previous['status']}; wait for it "
                                f"to finish", param="previous_response_id", code="previous_response_not_finished")
        items = store.chain_items(previous_id)
        if items is None:
            raise ApiError(404, f"a response in the chain of '{previous_id}' was deleted",
                           param="previous_response_id", code="previous_response_not_found")
        return items
    if conversation_id:
        items = store.conversation_items(conversation_id)
        if items is None:
            raise ApiError(404, f"conversation '{conversation_id}' not found", param="conversation",
                           code="conversation_not_found")
        return items
    return []


def build_prompt(chat_model: ChatModel, items: list[dict], instructions: str | None, chat: ChatInput,
                 sampling: SamplingParams, *, truncation: str, check_client: Callable[[], None],
                 inputs: int = 0, images: DecodedImages | None = None, **options: Any) -> GenerationRequest:
    """Render and tokenize; with truncation "auto", the newest items that fit. `inputs`: how
    many of the last items are the request's own input; `images`: those decoded already."""
    images = {} if images is None else images

    def build(kept: list[dict]) -> GenerationRequest:
        attempt = dataclasses.replace(chat, messages=to_messages(kept, instructions, inputs, images))
        return build_chat_request(chat_model, attempt, dataclasses.replace(sampling), **options)

    try:
        try:
            return build(items)
        except ContextOverflow:
            if truncation != "auto" or len(items) <= 1:
                raise
        return build_newest_that_fit(items, build, check_client)
    except ContextOverflow as failure:
        raise context_overflow(failure, "input") from None
    except PromptRefused as failure:
        error = api_error(failure)
        if error.param == "response_format":     # the schema is Responses' text.format
            error.param = "text.format"
            error.message = error.message.replace("'response_format'", "'text.format'")
        raise error from None


def build_newest_that_fit(items: list[dict], build: Callable[[list[dict]], GenerationRequest],
                          check_client: Callable[[], None]) -> GenerationRequest:
    """The request of the longest tail of items that fits the context: a binary search over the
    places the history may be cut (the prompt grows with what is kept), so a few renders and
    tokenizations, log2 of the items, where dropping one item at a time took one per item
    (2,000 items: a minute of a core). Between two builds, a client that left stops it."""
    cuts = cut_points(items)
    check_client()
    fitting = build(items[cuts[-1]:])           # the last item alone: if it does not fit, nothing does
    low, high = 0, len(cuts) - 1                # cuts[high] fits; every cut before low does not
    while low < high:
        middle = (low + high) // 2
        check_client()
        try:
            attempt = build(items[cuts[middle]:])
        except ContextOverflow:
            low = middle + 1
        else:
            high, fitting = middle, attempt
    return fitting


def read_text_format(body: dict, chat: ChatInput) -> dict:
    text = read_dict(body, "text") or {}
    fmt = text.get("format")
    echo: dict = {"format": {"type": "text"}}
    if text.get("verbosity") is not None:
        if text["verbosity"] not in ("low", "medium", "high"):
            raise invalid("text.verbosity", "expected low, medium or high")
        echo["verbosity"] = text["verbosity"]
    if fmt is None:
        return echo
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return echo
    if kind == "json_object":
        chat.json_object = True
        echo["format"] = {"type": "json_object"}
        return echo
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise invalid("text.format.schema", "json_schema needs a 'schema' object")
        name = fmt.get("name", "response")
        if not isinstance(name, str) or not name:
            raise invalid("text.format.name", "expected a non-empty string")
        chat.response_schema = schema
        echo["format"] = {"type": "json_schema", "name": name, "schema": schema,
                          "strict": fmt.get("strict") if isinstance(fmt.get("strict"), bool) else None,
                          "description": fmt.get("description") if isinstance(fmt.get("description"), str) else None}
        return echo
    raise invalid("text.format", f"type must be text, json_object or json_schema; got {kind!r}")


def read_reasoning(body: dict, chat: ChatInput) -> dict:
    reasoning = read_dict(body, "reasoning") or {}
    effort = reasoning.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise invalid("reasoning.effort", f"expected one of {', '.join(EFFORTS)}; got {effort!r}")
    summary = reasoning.get("summary", reasoning.get("generate_summary"))
    if summary is not None and summary not in SUMMARIES:
        raise invalid("reasoning.summary", f"expected one of {', '.join(SUMMARIES)}; got {summary!r}")
    if effort is not None:
        chat.template_kwargs.setdefault("reasoning_effort", effort)
        if effort == "none":
            chat.template_kwargs.setdefault("enable_thinking", False)
    return {"effort": effort, "summary": summary}


def read_include(body: dict) -> list[str]:
    include = body.get("include")
    if include is None:
        return []
    if not isinstance(include, list) or not all(isinstance(v, str) for v in include):
        raise invalid("include", "expected an array of strings")
    return include


def read_metadata(body: dict, name: str = "metadata") -> dict:
    metadata = read_dict(body, name)
    if metadata is None:
        return {}
    if len(metadata) > 16:
        raise invalid(name, "at most 16 keys are allowed")
    for key, value in metadata.items():
        if len(key) > 64:
            raise invalid(name, f"key '{key[:20]}…' is longer than 64 characters")
        if not isinstance(value, str) or len(value) > 512:
            raise invalid(name, f"value of '{key}' must be a string of at most 512 characters")
    return metadata
