"""Images in a conversation, and what a model without a vision projector makes of them.

Every dialect reads its image parts into conversation.Image (localserve/images.py checks each
one); then building the request (prompt/build.py's fit_images, called by build_chat_request
and render_prompt: no dialect calls it) takes the typed conversation through
:func:`fitted_messages`:
- holds the whole conversation to MAX_IMAGES_PER_REQUEST;
- for a model with no vision projector (ChatModel.vision False), refuses an image in the
  turn being answered (the user turns after the last assistant turn): the model cannot read
  what it is asked about, so the request is a 400 naming the model, as OpenAI answers for a
  text-only model. An image in an earlier turn or inside a tool result becomes the text
  IMAGE_OMITTED instead, so an agent loop that read a screenshot goes on; the count goes on
  the request (GenerationRequest.images_omitted) and the dialects say so in a header. A
  turn that answers tool calls is a tool loop going on, its images what the tools saw:
  clients put them in a user message beside the results where the dialect has no image
  in a tool result (Chat Completions), so those are shown as text too.
"""

from __future__ import annotations

import dataclasses

from ..conversation import Image, Message, Text, ToolResult, images_in
from ..generation import PromptRefused
from ..images import count_refusal, MAX_IMAGES_PER_REQUEST

IMAGE_OMITTED = "[image omitted: this model has no vision]"


def fitted_messages(messages: list[Message], *, vision: bool, model_name: str) -> tuple[list[Message], int]:
    """The messages as a model with (or without) vision can take them, and how many images became
    text; PromptRefused naming the image's part."""
    images = images_in(messages)
    if len(images) > MAX_IMAGES_PER_REQUEST:
        extra = images[MAX_IMAGES_PER_REQUEST]
        raise PromptRefused(f"invalid '{extra.where}': {count_refusal(len(images))}", code="too_many_images",
                            param=extra.where or "messages")
    if vision or not images:
        return messages, 0
    answered = messages[answered_from(messages):]
    asked = [] if any(m.of(ToolResult) for m in answered) else images_in(answered, results=False)
    if asked:
        where = asked[0].where
        raise PromptRefused(f"invalid '{where}': model '{model_name}' has no vision projector, so it cannot read "
                            f"images; use a model with one, or send text", code="model_has_no_vision",
                            param=where or "messages")
    return [without_images(message) for message in messages], len(images)


def answered_from(messages: list[Message]) -> int:
    """Where the turn being answered starts: after the last assistant message."""
    for i in reversed(range(len(messages))):
        if messages[i].role == "assistant":
            return i + 1
    return 0


def without_images(message: Message) -> Message:
    """The message with each image (its own, its tool results') as the IMAGE_OMITTED text."""
    if not images_in([message]):
        return message
    return dataclasses.replace(message, parts=tuple(_text_for_images(part) for part in message.parts))


def _text_for_images(part):
    if isinstance(part, Image):
        return Text(IMAGE_OMITTED)
    if isinstance(part, ToolResult) and not isinstance(part.content, str):
        return dataclasses.replace(part, content=tuple(Text(IMAGE_OMITTED) if isinstance(p, Image) else p
                                                       for p in part.content))
    return part
