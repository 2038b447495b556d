"""A clip's place in a prompt: prompt/media.py's step for a clip at a media marker.

Its segments come from libmtmd's decode through engine/audio.py, once a request per digest,
through the request's media scope (media.RequestImages.decode, the path an image's decode
takes too: the client asked after first, the decode run where the request's dialect says).
media.py places them as it places an image's: token lists as they are, each audio chunk (one
per 30-second window of a Whisper-style encoder) at the clip's placeholder ids as a
generation.ImageChunk, which the runtime evaluates as it does an image's, and by which the
prompt cache reuses a repeated clip and never cuts inside one.
"""

from __future__ import annotations

from ..conversation import Audio
from ..engine.facade import AudioUnreadable, EngineFacade
from ..generation import PromptRefused


def clip_segments(engine: EngineFacade, scope, clip: Audio) -> list:
    """The clip's segments; PromptRefused naming its part when libmtmd cannot decode it or it
    decodes to a clip the encoder must not get."""
    where = clip.where or "messages"
    try:
        return scope.decode(clip.digest, lambda stop: engine.audio_segments(clip.data, stop))
    except AudioUnreadable as exc:
        raise PromptRefused(f"invalid '{where}': {exc}", code=exc.code, param=where) from None
