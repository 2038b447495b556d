"""Audio clips in a conversation, and what a model without an audio encoder makes of them.

Every dialect that defines audio reads its parts into conversation.Audio (localserve/audio.py
checks each one); then, on the typed conversation, :func:`fitted_audio` (called by
prompt/build.py's fit_images, so every request building runs it):
- holds the conversation to MAX_AUDIO_PER_REQUEST clips and MAX_REQUEST_AUDIO_SECONDS of them
  (each distinct clip once);
- for a model whose projector has no audio encoder (ChatModel.audio False), refuses a clip in
  the turn being answered (400 model_has_no_audio naming its part); a clip in an earlier turn or
  a tool result becomes the text AUDIO_OMITTED, as an image does on a model without vision.

A clip's place in the prompt is audio_media.py's.
"""

from __future__ import annotations

import dataclasses

from ..audio import MAX_AUDIO_PER_REQUEST, MAX_REQUEST_AUDIO_SECONDS
from ..conversation import Audio, Message, Text, ToolResult, audio_in, media_in
from ..generation import PromptRefused

AUDIO_OMITTED = "[audio omitted: this model has no audio encoder]"


def fitted_audio(messages: list[Message], *, audio: bool, model_name: str) -> tuple[list[Message], int]:
    """The messages as a model with (or without) an audio encoder can take their clips, and how
    many clips became text; PromptRefused naming the clip's part."""
    clips = audio_in(messages)
    if not clips:
        return messages, 0
    check_request_audio(clips)
    if audio:
        return messages, 0
    answered = messages[_answered_from(messages):]
    asked = [] if any(m.of(ToolResult) for m in answered) else [p for m in answered for p in m.of(Audio)]
    if asked:
        where = asked[0].where or "messages"
        raise PromptRefused(f"invalid '{where}': model '{model_name}' has no audio encoder, so it cannot hear "
                            f"audio; use a model whose projector has one, or send text", code="model_has_no_audio",
                            param=where)
    return [without_audio(message) for message in messages], len(clips)


def check_request_audio(clips: list[Audio]) -> None:
    """PromptRefused naming the first clip past MAX_AUDIO_PER_REQUEST or MAX_REQUEST_AUDIO_SECONDS."""
    if len(clips) > MAX_AUDIO_PER_REQUEST:
        extra = clips[MAX_AUDIO_PER_REQUEST]
        raise PromptRefused(f"invalid '{extra.where}': the request carries {len(clips)} audio clips, more than "
                            f"MAX_AUDIO_PER_REQUEST ({MAX_AUDIO_PER_REQUEST}) allows", code="too_many_audio_clips",
                            param=extra.where or "messages")
    seen: set[str] = set()
    seconds = 0.0
    for clip in clips:
        if clip.digest in seen:
            continue
        seen.add(clip.digest)
        seconds += clip.seconds
        if seconds > MAX_REQUEST_AUDIO_SECONDS:
            raise PromptRefused(f"invalid '{clip.where}': the request's clips come to {seconds:.1f} seconds, more "
                                f"than MAX_REQUEST_AUDIO_SECONDS ({MAX_REQUEST_AUDIO_SECONDS:g}) allows",
                                code="audio_too_long", param=clip.where or "messages")


def _answered_from(messages: list[Message]) -> int:
    for i in reversed(range(len(messages))):
        if messages[i].role == "assistant":
            return i + 1
    return 0


def without_audio(message: Message) -> Message:
    """The message with each clip (its own, its tool results') as the AUDIO_OMITTED text."""
    if not any(isinstance(p, Audio) for p in media_in([message])):
        return message
    return dataclasses.replace(message, parts=tuple(_text_for_audio(part) for part in message.parts))


def _text_for_audio(part):
    if isinstance(part, Audio):
        return Text(AUDIO_OMITTED)
    if isinstance(part, ToolResult) and not isinstance(part.content, str):
        return dataclasses.replace(part, content=tuple(Text(AUDIO_OMITTED) if isinstance(p, Audio) else p
                                                       for p in part.content))
    return part
