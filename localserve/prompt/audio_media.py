"""A clip's place in a prompt: prompt/media.py's step for a clip at a media marker.

Its segments (libmtmd's decode through engine/audio.py, once a request per digest, kept in the
request's media scope, media.RequestImages, which asks after the client before each decode and
runs it where the request's dialect says: run_decode)
are appended to the prompt: token lists as they are, each audio chunk (one per 30-second
window of a Whisper-style encoder) at the clip's placeholder ids as a generation.ImageChunk,
which the runtime evaluates as it does an image's, and by which the prompt cache reuses a
repeated clip and never cuts inside one.
"""

from __future__ import annotations

from ..conversation import Audio
from ..engine.facade import AudioUnreadable, EngineFacade
from ..generation import ImageChunk, PromptRefused, placeholder_id


def add_audio(engine: EngineFacade, scope, clip: Audio, tokens: list[int], chunks: list[ImageChunk]) -> None:
    """The clip's segments onto the prompt's tokens and chunks; PromptRefused naming its part
    when libmtmd cannot decode it or it decodes to a clip the encoder must not get."""
    where = clip.where or "messages"
    if clip.digest not in scope.segments:
        scope.check_client()
        try:
            scope.segments[clip.digest] = scope.run_decode(lambda stop: engine.audio_segments(clip.data, stop))
        except AudioUnreadable as exc:
            raise PromptRefused(f"invalid '{where}': {exc}", code=exc.code, param=where) from None
    for segment in scope.segments[clip.digest]:
        if isinstance(segment, list):
            tokens += segment
            continue
        chunks.append(ImageChunk(len(tokens), segment.n_tokens, clip.digest, segment))
        tokens += [placeholder_id(clip.digest)] * segment.n_tokens
