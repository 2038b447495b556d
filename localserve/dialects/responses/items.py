"""Responses API items: reading them from a request, and turning them into the conversation.

Input arrives as a string or as items (messages, function calls, their outputs, reasoning).
Each item is validated and normalized to the shape the API returns when it lists items
(`GET /v1/responses/{id}/input_items`, conversation items): an id, `type`, `status`, and
content as typed parts. Stored items, chained items and conversation items are all in that
shape, so one function turns any run of them into the conversation (localserve/conversation.py)
that prompt.build_chat_request renders. A user message's `input_image` parts (a base64 data:
URL in `image_url`; a `file_id` is refused: there is no Files API) are checked as they are
read and kept as sent; so are those of a function call's output given as an array of parts.
An image is decoded once: read_input keeps what it decoded (DecodedImages) for to_messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ...conversation import Audio, Image, Message, Reasoning, Text, ToolCall, ToolResult, text_message
from ...errors import ApiError
from ...prompt.compaction import join_user_turn, summary_message
from ...store.store import ITEM_ID_PREFIXES, new_id
from ..fields import invalid
from ..function_tools import call_arguments
from ..audio_parts import INPUT_AUDIO, hold_audio_count, input_audio
from ..image_parts import hold_image_count, image_from_url, refused, typed_parts
from .tools import CUSTOM_INPUT, LOCAL_SHELL, qualified, shell_arguments

MESSAGE_ROLES = ("user", "system", "developer", "assistant")
ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning", "custom_tool_call",
              "custom_tool_call_output", "local_shell_call", "local_shell_call_output", "compaction",
              "compaction_trigger")
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
TEXT_PARTS = ("input_text", "output_text", "text")
MAX_ITEMS = 20          # per POST /v1/conversations or /v1/conversations/{id}/items, as the API allows

# Images (and audio clips) decoded, by their place in the request (input[0].content[1]) and their
# URL (a clip's base64 data).
DecodedImages = dict[tuple[str, str], Image | Audio]


def unsupported(param: str, message: str) -> ApiError:
    return ApiError(400, f"invalid '{param}': {message}", param=param, code="unsupported_value")


def read_input(value: Any, param: str = "input", images: DecodedImages | None = None) -> list[dict]:
    """A request's `input`: a string (one user message) or a list of items, normalized; the
    images checked on the way go into `images`, for to_messages."""
    if isinstance(value, str):
        return [message_item("user", value)]
    if not isinstance(value, list):
        raise invalid(param, "expected a string or an array of input items")
    hold_image_count(_media_places(value, param, "input_image"))
    hold_audio_count(_media_places(value, param, INPUT_AUDIO))
    return [normalize_item(item, f"{param}[{i}]", images) for i, item in enumerate(value)]


def read_items(value: Any, param: str = "items", *, required: bool = False) -> list[dict]:
    """Items for the Conversations API: a list of at most MAX_ITEMS items."""
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise invalid(param, "expected a non-empty array of items" if required else "expected an array of items")
    if len(value) > MAX_ITEMS:
        raise invalid(param, f"at most {MAX_ITEMS} items can be added at a time")
    hold_image_count(_media_places(value, param, "input_image"))
    hold_audio_count(_media_places(value, param, INPUT_AUDIO))
    items = [normalize_item(item, f"{param}[{i}]") for i, item in enumerate(value)]
    for i, item in enumerate(items):
        if item["type"] == "compaction_trigger":     # a request to compact, not a turn to keep
            raise unsupported(f"{param}[{i}].type", "a compaction_trigger belongs in a response's input")
    return items


def _media_places(items: list, param: str, kind: str) -> Iterator[str]:
    """Where the parts of type `kind` (input_image, input_audio) are: in a message's content and
    in a call output's output."""
    for i, item in enumerate(items):
        if isinstance(item, dict):
            yield from typed_parts(item.get("content"), f"{param}[{i}].content", kind)
            yield from typed_parts(item.get("output"), f"{param}[{i}].output", kind)


def message_item(role: str, text: str, item_id: str | None = None) -> dict:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []} if role == "assistant" \
        else {"type": "input_text", "text": text}
    return {"id": item_id or new_id("msg"), "type": "message", "role": role, "content": [part],
            "status": "completed"}


def normalize_item(item: Any, where: str, images: DecodedImages | None = None) -> dict:
    if not isinstance(item, dict):
        raise invalid(where, "expected an object")
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return _message(item, where, images)
    if kind == "function_call":
        return _function_call(item, where)
    if kind in OUTPUT_TYPES:
        return _call_output(item, where, kind, images)
    if kind == "reasoning":
        return _reasoning(item, where)
    if kind == "custom_tool_call":
        return _custom_tool_call(item, where)
    if kind == "local_shell_call":
        return _local_shell_call(item, where)
    if kind == "compaction":
        return {"id": _item_id(item, where, "compaction"), "type": "compaction",
                "encrypted_content": _required_str(item, "encrypted_content", where)}
    if kind == "compaction_trigger":
        return {"id": _item_id(item, where, "compaction_trigger"), "type": "compaction_trigger"}
    if kind is None:
        raise invalid(where, "an item needs a 'type' (or a 'role' for a message)")
    raise unsupported(f"{where}.type", f"item type '{kind}' is not supported; this server takes "
                                       f"{', '.join(ITEM_TYPES)} items")


def _item_id(item: dict, where: str, kind: str) -> str:
    value = item.get("id")
    if value is None or value == "":
        return new_id(ITEM_ID_PREFIXES.get(kind, "item"))
    if not isinstance(value, str):
        raise invalid(f"{where}.id", "expected a string")
    return value


def _message(item: dict, where: str, images: DecodedImages | None) -> dict:
    role = item.get("role")
    if role not in MESSAGE_ROLES:
        raise invalid(f"{where}.role", f"expected one of {', '.join(MESSAGE_ROLES)}, got {role!r}")
    parts = _content(item.get("content"), f"{where}.content", images, takes_images=role == "user")
    out = message_item(role, "", _item_id(item, where, "message"))
    template = out["content"][0]
    out["content"] = [part if isinstance(part, dict) else {**template, "text": part} for part in parts]
    return out


def _content(content: Any, where: str, images: DecodedImages | None, *, takes_images: bool) -> list[str | dict]:
    """Content parts: each text part's text; an image part (where they are taken) as the
    normalized input_image part, its image decoded into `images`."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise invalid(where, "expected a string or an array of content parts")
    parts: list[str | dict] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
        elif kind in TEXT_PARTS or kind == "refusal":
            raise invalid(f"{where}[{i}]", "a text part needs a string 'text'")
        elif kind == "input_image" and takes_images:
            parts.append(_input_image(part, f"{where}[{i}]", images))
        elif kind == "input_image":
            raise invalid(f"{where}[{i}]", "image parts are taken in user messages and function call outputs only")
        elif kind == INPUT_AUDIO and takes_images:        # audio_parts.py: kept as sent, like an image
            parts.append(_input_audio(part, f"{where}[{i}]", images))
        else:
            raise unsupported(f"{where}[{i}].type", f"content part type '{kind}' is not supported; "
                                                    f"this server takes text, input_image and input_audio parts")
    return parts


def _input_image(part: dict, where: str, images: DecodedImages | None) -> dict:
    """{"type": "input_image", "image_url": "data:...", "detail"?}, checked (decoded: kept in
    `images` when given), as it is listed."""
    detail = part.get("detail")
    if detail is not None and not isinstance(detail, str):     # any level: the projector reads its own size
        raise invalid(f"{where}.detail", "expected a string (auto, low, high)")
    if part.get("file_id") is not None and part.get("image_url") is None:
        raise refused(where, "file_id needs the Files API, which this server does not have; send the image "
                             "inline as a base64 data: URL in image_url", "unsupported_image_source")
    image = image_from_url(part.get("image_url"), where)
    if images is not None:
        images[(where, part["image_url"])] = image
    return {"type": "input_image", "image_url": part["image_url"], "detail": detail or "auto", "file_id": None}


def _input_audio(part: dict, where: str, images: DecodedImages | None) -> dict:
    """{"type": "input_audio", "input_audio": {"data", "format"}}, checked (kept in `images`)."""
    clip = input_audio(part, where)
    if images is not None:
        images[(where, part[INPUT_AUDIO]["data"])] = clip
    return {"type": INPUT_AUDIO, INPUT_AUDIO: {"data": part[INPUT_AUDIO]["data"], "format": clip.format}}


def _required_str(item: dict, key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise invalid(f"{where}.{key}", "expected a non-empty string")
    return value


def _namespace(item: dict, where: str, out: dict) -> dict:
    namespace = item.get("namespace")
    if namespace is not None:
        if not isinstance(namespace, str) or not namespace:
            raise invalid(f"{where}.namespace", "expected a non-empty string")
        out["namespace"] = namespace
    return out


def _function_call(item: dict, where: str) -> dict:
    arguments = item.get("arguments", "{}")
    if isinstance(arguments, dict):
        arguments = orjson.dumps(arguments).decode()
    if not isinstance(arguments, str):
        raise invalid(f"{where}.arguments", "expected a JSON string")
    return _call(item, where, "function_call", arguments=arguments)


def _custom_tool_call(item: dict, where: str) -> dict:
    text = item.get("input")
    if not isinstance(text, str):
        raise invalid(f"{where}.input", "expected a string")
    return _call(item, where, "custom_tool_call", input=text)


def _call(item: dict, where: str, kind: str, **payload: str) -> dict:
    """A call item of `kind` as stored: its id, call_id and name checked, payload its arguments or input."""
    return _namespace(item, where, {
        "id": _item_id(item, where, kind), "type": kind, "call_id": _required_str(item, "call_id", where),
        "name": _required_str(item, "name", where), **payload, "status": "completed"})


def _local_shell_call(item: dict, where: str) -> dict:
    action = item.get("action")
    if not isinstance(action, dict) or not isinstance(action.get("command"), list) or not all(
            isinstance(c, str) for c in action["command"]):
        raise invalid(f"{where}.action", "expected an exec action with a 'command' array of strings")
    call_id = item.get("call_id") or item.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.call_id", "expected a non-empty string")
    return {"id": _item_id(item, where, "local_shell_call"), "type": "local_shell_call", "call_id": call_id,
            "action": {"type": "exec", "env": {}, **action}, "status": "completed"}


def _call_output(item: dict, where: str, kind: str, images: DecodedImages | None) -> dict:
    output = item.get("output")
    if isinstance(output, list):
        parts = _content(output, f"{where}.output", images, takes_images=True)
        output = [p if isinstance(p, dict) else {"type": "input_text", "text": p} for p in parts] \
            if any(isinstance(p, dict) for p in parts) else "\n".join(parts)
    if not isinstance(output, (str, list)):
        raise invalid(f"{where}.output", "expected a string or an array of text and image parts")
    if kind == "local_shell_call_output":   # its `id` is the call's id
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise invalid(f"{where}.id", "expected the id of the local_shell_call")
        return {"id": call_id, "type": kind, "call_id": call_id, "output": output, "status": "completed"}
    return {"id": _item_id(item, where, kind), "type": kind,
            "call_id": _required_str(item, "call_id", where), "output": output, "status": "completed"}


def _reasoning(item: dict, where: str) -> dict:
    out: dict = {"id": _item_id(item, where, "reasoning"), "type": "reasoning", "summary": []}
    for key, part_type in (("summary", "summary_text"), ("content", "reasoning_text")):
        parts = item.get(key)
        if parts is None:
            continue
        if not isinstance(parts, list) or not all(
                isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts):
            raise invalid(f"{where}.{key}", "expected an array of text parts")
        out[key] = [{"type": part_type, "text": p["text"]} for p in parts]
    sealed = item.get("encrypted_content")
    if sealed is not None:
        if not isinstance(sealed, str):
            raise invalid(f"{where}.encrypted_content", "expected a string")
        out["encrypted_content"] = sealed
    out["status"] = "completed"
    return out


# ---- items → the conversation ---------------------------------------------------------

def item_text(item: dict) -> str:
    """The text of a message item, or the reasoning of a reasoning item."""
    if item["type"] == "reasoning":
        parts = item.get("content") or item.get("summary") or []
    else:
        parts = item.get("content") or []
    return "\n".join(p.get("text") or p.get("refusal") or "" for p in parts)


def to_messages(items: list[dict], instructions: str | None = None, inputs: int = 0,
                images: DecodedImages | None = None) -> list[Message]:
    """Normalized items → the conversation. Consecutive function calls (and the assistant text
    before them) become one assistant turn; a reasoning item goes with the next one. inputs:
    how many of the last items are the request's `input` (an image names its place there);
    images: the images already decoded, by place and URL (read_input's; a truncated history is
    turned into messages a few times over; each image is decoded and hashed once)."""
    images = {} if images is None else images
    messages: list[Message] = [text_message("system", instructions)] if instructions else []
    names: dict[str, str] = {}
    reasoning: str | None = None
    after_summary = False          # a user turn next joins the summary's (turns alternate)
    for j, item in enumerate(items):
        kind = item["type"]
        if kind == "compaction_trigger":        # a request to compact, not a turn (compacting.split_trigger)
            continue
        where = f"input[{j - len(items) + inputs}]" if j >= len(items) - inputs else "previous_response_id"
        if kind == "reasoning":
            reasoning = item_text(item) or None
        elif kind == "message" and item["role"] == "user" and after_summary:
            messages[:] = join_user_turn(messages, Message("user", _parts(item["content"], f"{where}.content", images)))
        elif kind == "message" and item["role"] != "assistant":
            messages.append(Message(item["role"], _parts(item["content"], f"{where}.content", images)))
        elif kind == "message":
            messages.append(Message("assistant", (Text(item_text(item)), *_reasoning_part(reasoning))))
            reasoning = None
        elif kind in CALL_TYPES:
            call = call_of(item)
            names[item["call_id"]] = call.name
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and reasoning is None:
                messages[-1] = Message("assistant", (*last.parts, call))
            else:
                messages.append(Message("assistant", (Text(""), *_reasoning_part(reasoning), call)))
                reasoning = None
        elif kind in OUTPUT_TYPES:
            output = item["output"]
            content = output if isinstance(output, str) else _parts(output, f"{where}.output", images)
            messages.append(Message("tool", (ToolResult(item["call_id"], content, name=names.get(item["call_id"])),)))
        elif kind == "compaction":        # opened (responses/compacting.py): the summary it seals
            messages[:] = join_user_turn(messages, summary_message(item.get("summary", "")))
        after_summary = kind == "compaction" or (after_summary and kind == "message" and item["role"] == "user")
    return messages


def _parts(parts: list[dict], where: str, images: DecodedImages) -> tuple[Text | Image, ...]:
    """Normalized content parts as the conversation's (images were checked when read)."""
    out: list[Text | Image] = []
    for k, part in enumerate(parts):
        if part["type"] == "input_image":
            key = (f"{where}[{k}]", part["image_url"])
            if key not in images:
                images[key] = image_from_url(part["image_url"], key[0])
            out.append(images[key])
        elif part["type"] == INPUT_AUDIO:
            key = (f"{where}[{k}]", part[INPUT_AUDIO]["data"])
            if key not in images:
                images[key] = input_audio(part, key[0])
            out.append(images[key])
        else:
            out.append(Text(part.get("text") or part.get("refusal") or ""))
    return tuple(out)


def call_of(item: dict) -> ToolCall:
    """A call item as the model wrote it: the name it called (qualified) and its arguments."""
    kind = item["type"]
    if kind == "custom_tool_call":
        return ToolCall(item["call_id"], qualified(item["name"], item.get("namespace")), {CUSTOM_INPUT: item["input"]})
    if kind == "local_shell_call":
        return ToolCall(item["call_id"], LOCAL_SHELL, shell_arguments(item["action"]))
    return ToolCall(item["call_id"], qualified(item["name"], item.get("namespace")),
                    *call_arguments(item["arguments"]))


def _reasoning_part(reasoning: str | None) -> tuple[Reasoning, ...]:
    return (Reasoning(reasoning),) if reasoning else ()


def cut_points(items: list[dict]) -> list[int]:
    """Where the history may start once its oldest items are dropped, oldest first: after each
    item, skipping the function outputs or reasoning a cut would leave orphaned; the last item
    always stays, and so does the last turn before compaction_trigger items at the end (the
    input renders with them in place, and they are no turn: compacting.split_trigger)."""
    end = len(items)
    while end > 1 and items[end - 1]["type"] == "compaction_trigger":
        end -= 1
    cuts, start = [], 0
    while end - start > 1:
        start += 1
        while items[start]["type"] in (*OUTPUT_TYPES, "reasoning") and end - start > 1:
            start += 1
        cuts.append(start)
    return cuts
