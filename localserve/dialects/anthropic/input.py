"""Anthropic Messages input → the conversation (localserve/conversation.py) every template is rendered from.

- `system` (a string or text blocks) becomes a leading system message (without Claude
  Code's `x-anthropic-billing-header:` line, which changes per request); `role: "system"`
  messages inside `messages` stay where they are (prompt.render_chat folds them into the
  user turns for a template that takes no system turn there); one with `clear_at:
  "next_user_message"` is left out once a user turn follows it, and its
  `output_config.effort`, after the last user turn, is this turn's effort.
- A user turn's `tool_result` blocks become role "tool" messages (in order, before the
  turn's text), each a ToolResult with the tool_use's id, its text and is_error. Image
  blocks (`source` base64 with its media_type; a `url` source is refused, not fetched) are
  taken in a user turn and inside a tool_result's content (dialects/image_parts.py).
- An assistant turn's `tool_use` blocks become ToolCalls (their own ids, `input` as the
  arguments), its `thinking` blocks a Reasoning part (the template decides whether to show it) once
  their signatures verify: a thinking block this server did not sign is a 400. A block
  that comes back with its text left out (display "omitted") gets it from the signature.
- A `compaction` block (compaction.py) ends what is read of the history before it: the last
  one with a summary (in an assistant turn, as this server answers it, or a user turn) stands
  for every message and block before it, as a user turn.
- `tools` (`input_schema`) become tool definitions (server tools such as web search are
  left out, and named in a response header); `tool_choice` any/tool/none map to
  required/named/none; `thinking` (enabled with budget_tokens, adaptive, disabled) and
  `output_config.effort` set the reasoning budget and the template's enable_thinking and
  reasoning_effort; `output_config.format` (a JSON schema) constrains the answer
  (these in tools_and_thinking.py).
- `cache_control` on a block (or on the request, for automatic caching) marks its message
  as a breakpoint: the last one tells prompt.py where this request's cache ends.
Consecutive user turns are merged, as Anthropic does, so strict templates see alternation.
Fields this module does not read are ignored, never an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...conversation import Image, Message, Reasoning, Text, ToolCall, ToolResult, text_message
from ...prompt.build import ChatInput
from ...prompt.compaction import summary_message
from ..audio_parts import AUDIO_KINDS, no_audio_here
from ..signing import recover, verify
from ..fields import invalid, read_template_kwargs
from ..image_parts import hold_image_count, image_from_base64, refused, typed_parts
from .compaction import find_cut, read_summary
from .tools_and_thinking import Thinking, read_output_config, read_thinking, read_tool_choice, read_tools

TAKEN = "this server takes text and images"


@dataclass
class MessagesInput:
    """A Messages request's input: the chat to render and what shapes its answer."""
    chat: ChatInput
    thinking: Thinking
    cache_breakpoint: int | None     # index in chat.messages of the last message a cache_control marks
    ignored_tools: list[str]         # server tool types left out


@dataclass
class Turn:
    """A message read, and whether a cache_control breakpoint marks it."""
    message: Message
    marked: bool = False


def read_input(body: dict, signing_key: bytes) -> MessagesInput:
    turns: list[Turn] = []
    for turn in read_system(body.get("system")) + read_messages(body.get("messages"), signing_key):
        _append(turns, turn)
    ignored: list[str] = []
    tools = read_tools(body.get("tools"), ignored)
    if turns and turns[0].message.role == "system" and any(_marked(t) for t in body.get("tools") or ()):
        turns[0].marked = True      # tools render with (or just after) the system prompt
    if body.get("cache_control") is not None and turns:
        turns[-1].marked = True     # automatic caching: up to the last message
    marked = [i for i, turn in enumerate(turns) if turn.marked]
    choice, parallel = read_tool_choice(body.get("tool_choice"), tools)
    chat = ChatInput(messages=[turn.message for turn in turns], tools=tools, tool_choice=choice,
                     parallel_tool_calls=parallel, template_kwargs=read_template_kwargs(body))
    request_effort = read_output_config(body, chat)
    effort = _turn_effort(body["messages"]) or request_effort
    if effort:
        chat.template_kwargs.setdefault("reasoning_effort", effort)
    thinking = read_thinking(body.get("thinking"), effort, chat.template_kwargs)
    chat.reasoning_budget = thinking.budget
    return MessagesInput(chat, thinking, marked[-1] if marked else None, ignored)


def _turn_effort(messages: list) -> str | None:
    """output_config.effort of a system message after the last user turn: it sets this turn's effort."""
    effort = None
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        config = message.get("output_config") if message.get("role") == "system" else None
        if isinstance(config, dict) and isinstance(config.get("effort"), str):
            effort = effort or config["effort"]
    return effort


def read_chat(body: dict, signing_key: bytes) -> ChatInput:
    return read_input(body, signing_key).chat


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


# Claude Code opens its system prompt with a line that changes from one request (or
# session) to the next and says nothing to the model; left in, it would be the first
# difference between two prompts and cost the prompt cache everything after it.
BILLING_HEADER = "x-anthropic-billing-header:"


def read_system(system: Any) -> list[Turn]:
    if system is None:
        return []
    if isinstance(system, str):
        texts = [system]
    elif isinstance(system, list):
        texts = [_text_of(block, f"system[{i}]") for i, block in enumerate(system)]
    else:
        raise invalid("system", "expected a string or an array of text blocks")
    if texts and texts[0].startswith(BILLING_HEADER):
        first = texts[0].partition("\n")[2]
        texts = ([first] if first else []) + texts[1:]
    text = "\n".join(texts)
    if not text:
        return []
    return [Turn(text_message("system", text), isinstance(system, list) and any(_marked(b) for b in system))]


def read_messages(messages: Any, signing_key: bytes) -> list[Turn]:
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "expected a non-empty array of messages")
    hold_image_count(_image_places(messages))
    out: list[Turn] = []
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"),
                    default=-1)
    cut = find_cut(messages)        # a compaction block: what came before it is its summary
    if cut is not None:
        out.append(Turn(summary_message(cut.summary), cut.marked))
    for i, message in enumerate(messages):
        if cut is not None and i < cut.message:
            continue
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(where, "expected an object")
        role = message.get("role")
        content = message.get("content")
        first = cut.block + 1 if cut is not None and i == cut.message else 0   # the blocks after the summary
        if first and first == len(content):     # the turn held the summary alone (paused there)
            continue
        if isinstance(content, str):
            blocks: list = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = content
        elif content is None and role == "system":     # a system message may carry only output_config
            blocks = []
        else:
            raise invalid(f"{where}.content", "expected a string or an array of content blocks")
        if role == "user":
            converted = _user_turn(blocks, f"{where}.content", first)
        elif role == "assistant":
            converted = [_assistant_turn(blocks, f"{where}.content", signing_key, first)]
        elif role == "system":
            # clear_at "next_user_message": shown only until a user turn follows it
            shown = message.get("clear_at") != "next_user_message" or i > last_user
            system = _system_turn(blocks, f"{where}.content")
            converted = [system] if shown and system.text else []
        else:
            raise invalid(f"{where}.role", f"expected user, assistant or system; got {role!r}")
        turns = [Turn(m) for m in converted]
        if turns and any(_marked(b) for b in blocks[first:]):
            turns[-1].marked = True
        for turn in turns:
            _append(out, turn)
    return out


def _image_places(messages: list) -> Iterator[str]:
    """Where the image blocks are: in a message's content and in its tool results' content."""
    for i, message in enumerate(messages):
        blocks = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(blocks if isinstance(blocks, list) else ()):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "image":
                yield f"messages[{i}].content[{j}]"
            elif kind == "tool_result":
                yield from typed_parts(block.get("content"), f"messages[{i}].content[{j}].content", "image")


def _append(out: list[Turn], turn: Turn) -> None:
    last = out[-1] if out else None
    role = turn.message.role
    # consecutive user turns are one turn; so are system turns before any other
    same = last is not None and role == last.message.role and (
        role == "user" or (role == "system" and all(t.message.role == "system" for t in out)))
    if same:
        out[-1] = Turn(_merged(last.message, turn.message), last.marked or turn.marked)
    else:
        out.append(turn)


def _merged(first: Message, second: Message) -> Message:
    """Two user (or system) turns as one: their texts joined by a line break, their images kept."""
    if not first.of(Image) and not second.of(Image):
        return text_message(first.role, "\n".join(t for t in (first.text, second.text) if t))
    parts = [p for p in (*first.parts, *second.parts) if not isinstance(p, Text) or p.text]
    return Message(first.role, tuple(parts))


def _system_turn(blocks: list, where: str) -> Message:
    """A system message inside `messages`: kept in its place (prompt.render_chat decides
    how the template shows it); text blocks only."""
    texts = [_text_of(block, f"{where}[{j}]") for j, block in enumerate(blocks)]
    return text_message("system", "\n".join(texts))


def _user_turn(blocks: list, where: str, first: int = 0) -> list[Message]:
    """A user turn's tool results, each a tool message (first, in order), then its text and
    images (in their order); from blocks[first] on (the blocks after a compaction block)."""
    results: list[Message] = []
    texts: list[str] = []
    content: list[Text | Image] = []
    for j, block in enumerate(blocks[first:], start=first):
        kind = _block_type(block, f"{where}[{j}]")
        if kind == "text":
            texts.append(_text_of(block, f"{where}[{j}]"))
            content.append(Text(texts[-1]))
        elif kind == "image":
            content.append(_image(block, f"{where}[{j}]"))
        elif kind == "tool_result":
            results.append(Message("tool", (_tool_result(block, f"{where}[{j}]"),)))
        elif kind == "compaction":      # after the last summary: a failed compaction's (null), no-op
            read_summary(block, f"{where}[{j}]")
        elif kind in ("tool_use", "thinking", "redacted_thinking"):
            raise invalid(f"{where}[{j}]", f"a {kind} block belongs in an assistant message")
        else:
            raise _unsupported(kind, f"{where}[{j}]")
    if len(content) > len(texts):        # images: the parts in order
        results.append(Message("user", tuple(content)))
    elif texts or not results:
        results.append(text_message("user", "\n".join(texts)))
    return results


def _image(block: dict, where: str) -> Image:
    """{"type": "image", "source": {"type": "base64", "media_type", "data"}}."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        media_type = source.get("media_type")
        if not isinstance(media_type, str):
            raise invalid(f"{where}.source.media_type", "expected the image's media type (image/png, ...)")
        return image_from_base64(source.get("data"), media_type, where)
    if kind == "url":
        raise refused(where, "remote image URLs are not fetched: this server does not reach the network "
                             "(air-gapped by design); send the image as a base64 source", "remote_image_url")
    if kind == "file":
        raise refused(where, "file sources need the Files API, which this server does not have; send the "
                             "image as a base64 source", "unsupported_image_source")
    raise invalid(f"{where}.source", 'expected {"type": "base64", "media_type": ..., "data": ...}')


def _tool_result(block: dict, where: str) -> ToolResult:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.tool_use_id", "expected the id of the tool_use this answers")
    content = block.get("content")
    if content is None:
        text: str | tuple[Text | Image, ...] = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = _result_content(content, f"{where}.content")
    else:
        raise invalid(f"{where}.content", "expected a string or an array of text and image blocks")
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise invalid(f"{where}.is_error", "expected a boolean")
    return ToolResult(call_id, text, is_error=bool(is_error))


def _result_content(content: list, where: str) -> str | tuple[Text | Image, ...]:
    """A tool_result's blocks: their text (joined by line breaks), or the parts in order when
    it has images (a screenshot, an image file the tool read)."""
    parts: list[Text | Image] = []
    for k, part in enumerate(content):
        kind = _block_type(part, f"{where}[{k}]")
        if kind == "tool_reference":     # tool search found a tool (every tool is rendered already)
            parts.append(Text(f"[tool available: {part.get('tool_name')}]"))
        elif kind == "image":
            parts.append(_image(part, f"{where}[{k}]"))
        elif kind == "text":
            parts.append(Text(_text_of(part, f"{where}[{k}]")))
        else:
            raise _unsupported(kind, f"{where}[{k}]")
    if any(isinstance(p, Image) for p in parts):
        return tuple(parts)
    return "\n".join(p.text for p in parts if isinstance(p, Text))


def _assistant_turn(blocks: list, where: str, signing_key: bytes, first: int = 0) -> Message:
    """The turn from blocks[first] on (the blocks after a compaction block)."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks[first:], start=first):
        at = f"{where}[{j}]"
        kind = _block_type(block, at)
        if kind == "text":
            texts.append(_text_of(block, at))
        elif kind == "thinking":
            reasoning.append(_verified_thinking(block, at, signing_key))
        elif kind == "redacted_thinking":
            raise invalid(at, "redacted_thinking blocks are not produced by this server and cannot be verified")
        elif kind == "tool_use":
            calls.append(_tool_use(block, at))
        elif kind == "tool_result":
            raise invalid(at, "a tool_result block belongs in a user message")
        elif kind == "compaction":      # after the last summary: a failed compaction's (null), no-op
            read_summary(block, at)
        else:
            raise _unsupported(kind, at)
    # the turn's text blocks are one text, as Anthropic joins them; its thinking blocks one reasoning
    thinking = (Reasoning("\n".join(reasoning)),) if reasoning else ()
    return Message("assistant", (Text("".join(texts)), *thinking, *calls))


def _verified_thinking(block: dict, where: str, signing_key: bytes) -> str:
    thinking = block.get("thinking")
    if not isinstance(thinking, str):
        raise invalid(f"{where}.thinking", "expected a string")
    if not thinking:       # display "omitted": the text comes back sealed in the signature
        sealed = recover(signing_key, block.get("signature"))
        if sealed is not None:
            return sealed
    if not verify(signing_key, thinking, block.get("signature")):
        raise invalid(f"{where}.signature", "the thinking block's signature does not match its text; "
                                            "send thinking blocks back exactly as this server returned them")
    return thinking


def _tool_use(block: dict, where: str) -> ToolCall:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.id", "expected a string")
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}.name", "expected a string")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise invalid(f"{where}.input", "expected an object")
    return ToolCall(call_id, name, arguments)


def _block_type(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise invalid(where, "expected a content block: an object with a 'type'")
    return block["type"]


def _text_of(block: Any, where: str) -> str:
    kind = _block_type(block, where)
    if kind != "text":
        raise _unsupported(kind, where)
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid(f"{where}.text", "expected a string")
    return text


def _unsupported(kind: str, where: str):
    if kind == "image":
        return invalid(where, "image blocks are taken in user messages and tool results only")
    if kind in AUDIO_KINDS:
        return no_audio_here(where, "Anthropic's Messages API")
    return invalid(where, f"content blocks of type '{kind}' are not supported; {TAKEN}")
