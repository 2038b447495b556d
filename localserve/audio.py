"""A clip's bytes, checked before anything decodes them: media_checks.py's reader of a clip.

A client sends a clip inline: base64 with a declared format (Chat Completions'
``input_audio`` {data, format}, decoded by media_checks.py within MAX_AUDIO_BYTES), or a file's
bytes (a transcription's multipart ``file``). Here the bytes become a
:class:`~localserve.conversation.Audio` or an AudioRefused saying why not, from their own
structure alone (stdlib only; the samples are decoded later by libmtmd's own decoders,
resampled to its encoder's rate: engine/audio.py):

- the format is sniffed from the magic bytes (WAV, MP3, FLAC); a declared one must agree;
  other containers (Ogg, WebM, MP4/M4A, AIFF, ...) are refused by name;
- the bytes are held to MAX_AUDIO_BYTES; then audio_headers.py reads
  the header (channels, rate, sample size, the declared length) and the clip is held to
  MAX_AUDIO_SECONDS; a request's clips together to MAX_REQUEST_AUDIO_SECONDS (media_checks.py,
  counting what each may decode to: an MP3 whose frames walk as 10 s may hide frames that decode
  to 200 s),
  the decoded length checked again against both once libmtmd has decoded it.
The caller names the request part (``messages[2].content[1]``) in the error it makes.
"""

from __future__ import annotations

from .audio_headers import AudioRefused, read_flac, read_mp3, read_wav, without_id3
from .conversation import Audio

MAX_AUDIO_BYTES = 25 * 1024 * 1024     # one clip's bytes: OpenAI's transcription file limit
MAX_AUDIO_SECONDS = 300.0              # one clip: ten of the 30-second windows Whisper-style encoders read
MAX_REQUEST_AUDIO_SECONDS = 600.0      # one request's clips, each distinct one once
MAX_AUDIO_PER_REQUEST = 20             # clips in one request's conversation

FORMATS = ("wav", "mp3", "flac")
FORMAT_ALIASES = {"wave": "wav", "x-wav": "wav", "mpeg": "mp3", "mpga": "mp3", "x-flac": "flac"}


def from_bytes(data: bytes, audio_format: object = None, where: str = "") -> Audio:
    """A clip from its bytes: a format libmtmd decodes, agreeing with the declared one, within
    the byte and duration limits."""
    if len(data) > MAX_AUDIO_BYTES:
        raise too_large(len(data))
    if not data:
        raise AudioRefused("the audio is empty", "audio_too_short")
    found = sniff(data)
    if found not in FORMATS:
        raise AudioRefused(f"the audio is {found}, which is not read here; accepted formats are WAV, MP3 and FLAC"
                           if found else "the data is not audio: its first bytes match no audio format; accepted "
                           "formats are WAV, MP3 and FLAC", "unsupported_audio_format")
    if audio_format is not None:
        declared = declared_format(audio_format)
        if declared != found:
            raise AudioRefused(f"the format says {str(audio_format)[:40]!r} but the bytes are {found.upper()}",
                               "audio_format_mismatch")
    facts = read_wav(data) if found == "wav" else read_mp3(data, MAX_AUDIO_SECONDS) if found == "mp3" \
        else read_flac(data)
    if facts.seconds > MAX_AUDIO_SECONDS:
        raise too_long(facts.seconds)
    return Audio(facts.data, found, where=where, seconds=facts.seconds, most_seconds=facts.most_seconds)


def declared_format(audio_format: object) -> str:
    """The format a client named ("wav", "audio/mpeg", "x-flac", ...) as one of FORMATS."""
    if not isinstance(audio_format, str):
        raise AudioRefused("the audio format must be a string: wav, mp3 or flac")
    name = audio_format.strip().lower().removeprefix("audio/")
    name = FORMAT_ALIASES.get(name, name)
    if name not in FORMATS:
        raise AudioRefused(f"the audio format {audio_format[:40]!r} is not read here; accepted formats are wav, "
                           "mp3 and flac", "unsupported_audio_format")
    return name


def too_long(seconds: float) -> AudioRefused:
    return AudioRefused(f"the clip is {seconds:.1f} seconds long, more than MAX_AUDIO_SECONDS ({MAX_AUDIO_SECONDS:g}) "
                        "allows", "audio_too_long")


def too_large(size: int) -> AudioRefused:
    return AudioRefused(f"the audio is {size} bytes, more than MAX_AUDIO_BYTES ({MAX_AUDIO_BYTES}) allows",
                        "audio_too_large")


def sniff(data: bytes) -> str | None:
    """"wav", "mp3" or "flac" from the magic bytes, a name for another format, or None."""
    if data.startswith(b"RIFF") and data[8:12] == b"WAVE":
        return "wav"
    if data.startswith((b"RF64", b"BW64")) or (data.startswith(b"RIFF") and data[8:12] != b"WAVE"):
        return "a RIFF file that is no plain WAVE (RF64, AVI, WebP, ...)"
    if data.startswith(b"ID3"):
        try:
            stream = without_id3(data)
        except AudioRefused:
            return "mp3"              # read_mp3 says what is wrong with the tag
        return "flac" if stream.startswith(b"fLaC") else "mp3"
    if data.startswith(b"fLaC"):
        return "flac"
    if len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:
        return "mp3"
    if data.startswith(b"OggS"):
        return "Ogg (Vorbis, Opus or Ogg FLAC)"
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return "WebM/Matroska"
    if data[4:8] == b"ftyp":
        return "MP4/M4A"
    if data.startswith(b"FORM") and data[8:12] in (b"AIFF", b"AIFC"):
        return "AIFF"
    return None
