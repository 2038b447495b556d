"""Images in a legacy completion, as llama-server's /completion takes them: the prompt is an
object ``{"prompt_string": text, "multimodal_data": [base64, ...]}`` whose text holds libmtmd's
default marker ``<__media__>`` once per image, in order. Each image is checked as every
dialect's is (localserve/media_checks.py); the markers then become the per-process media marker, so
the prompt goes down the same tokenization path as a chat's rendered prompt (prompt/media.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ...conversation import Message
from ...generation import MEDIA_MARKER, ImageChunk
from ...prompt.build import ChatInput, ChatModel, fit_images
from ...prompt.media import tokenize_with_images
from ..fields import invalid
from ..audio_parts import audio_from_base64, is_audio_base64
from ..image_parts import hold_image_count, image_from_base64

# What llama-server's clients write where an image stands (libmtmd's mtmd_default_marker()).
LIBMTMD_MARKER = "<__media__>"
TEXT_FIELD = "prompt.prompt_string"
IMAGES_FIELD = "prompt.multimodal_data"


@dataclass
class MultimodalPrompt:
    text: str                                   # the prompt as the client wrote it (what echo returns)
    tokens: list[int] = field(default_factory=list)
    images: list[ImageChunk] = field(default_factory=list)


def is_object_prompt(prompt: Any) -> bool:
    """llama-server's object prompt, alone or as a batch of one."""
    return isinstance(prompt, dict) or (isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], dict))


def read_object_prompt(chat_model: ChatModel, prompt: Any, text_tokens: Callable[[str], list[int]]) -> MultimodalPrompt:
    """The prompt's tokens and image chunks; text_tokens(text) tokenizes a prompt with no
    images, as a plain string prompt is."""
    if isinstance(prompt, list):
        prompt = prompt[0]
    text = prompt.get("prompt_string")
    if not isinstance(text, str):
        raise invalid(TEXT_FIELD, "expected a string (the prompt's text) beside multimodal_data")
    if "multimodal_data" not in prompt:       # as llama-server: the text alone, markers and all
        return MultimodalPrompt(text, text_tokens(text))
    data = prompt["multimodal_data"]
    if not isinstance(data, list):
        raise invalid(IMAGES_FIELD, "expected an array of base64 images")
    hold_image_count(f"{IMAGES_FIELD}[{i}]" for i in range(len(data)))
    # an item is a clip where its bytes say so (audio_parts.py), as llama-server's helper sniffs them
    images = [audio_from_base64(item, None, f"{IMAGES_FIELD}[{i}]") if is_audio_base64(item)
              else image_from_base64(item, None, f"{IMAGES_FIELD}[{i}]") for i, item in enumerate(data)]
    markers = text.count(LIBMTMD_MARKER)
    if markers != len(images):
        raise invalid(TEXT_FIELD, f"holds {markers} {LIBMTMD_MARKER} marker(s) for the {len(images)} image(s) "
                                  f"of multimodal_data: put one where each image stands, in order")
    if not images:
        return MultimodalPrompt(text, text_tokens(text))
    fit_images(chat_model, ChatInput([Message("user", tuple(images))]))     # all of them in the turn answered
    if text.endswith(LIBMTMD_MARKER):     # the next token's logits are read off the prompt's last token
        raise invalid(TEXT_FIELD, "ends with an image: put text after the last marker")
    tokens, chunks = tokenize_with_images(chat_model.engine, text.replace(LIBMTMD_MARKER, MEDIA_MARKER), images)
    return MultimodalPrompt(text, tokens, chunks)
