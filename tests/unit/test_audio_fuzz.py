"""The audio readers fuzzed (hypothesis), as `make fuzz` fuzzes the HTTP parser: whatever bytes
arrive, localserve/audio.py, audio_headers.py, media_checks.py's base64 reader, multipart.py and
the transcription form answer with a clip (or a form) or their own refusal (AudioRefused and the
InputRefused it is, MultipartError, ApiError), never
another exception; and what they accept is bounded: a clip's declared length within
MAX_AUDIO_SECONDS (libmtmd sizes its sample buffer from it), the bytes handed on no larger than
those received plus a canonical WAV header, the memory a read takes a small multiple of its input.

Inputs are arbitrary bytes, and valid clips and forms mutated (bytes flipped, cut, inserted;
header fields drawn whole: WAV fmt fields, an MP3 frame header and Xing count, a FLAC
STREAMINFO), so the draws reach past the magic bytes into every reader."""

from __future__ import annotations

import struct
import tracemalloc

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from localserve import audio
from localserve.audio_headers import AudioRefused
from localserve.dialects.openai.transcription_form import read_form
from localserve.errors import ApiError, InputRefused
from localserve.media_checks import AUDIO, read_base64
from localserve.multipart import MAX_FIELD_BYTES, MAX_PARTS, MultipartError, parse_form
from tinyaudio import flac_bytes, mp3_bytes, tone, wav_bytes, with_xing

WAV = wav_bytes(tone(0.05))
MP3 = with_xing(mp3_bytes(tone(0.1)), 10)
FLAC = flac_bytes(tone(0.05))
SEEDS = (WAV, MP3, FLAC, b"ID3\x03\x00\x00\x00\x00\x00\x04abcd" + MP3, b"ID3\x04\x00\x10\x00\x00\x00\x00" + FLAC)
CANONICAL_HEADER = 44                   # RIFF + fmt (16 bytes) + data chunk heads
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
B = "fuzz-boundary"
CT = f"multipart/form-data; boundary={B}"


@st.composite
def mutated(draw, seeds: tuple[bytes, ...] = SEEDS) -> bytes:
    """A seed with a few edits: bytes overwritten, a cut, bytes inserted."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(st.sampled_from(("set", "cut", "insert", "truncate")))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if edit == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif edit == "cut":
            del data[at:at + draw(st.integers(1, 64))]
        elif edit == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[draw(st.integers(0, 64)):]
    return bytes(data)


@st.composite
def wav_headers(draw) -> bytes:
    """A WAV whose fmt fields are drawn whole (tag, channels, rate, byte rate, block, bits)."""
    fmt = struct.pack("<HHIIHH", draw(st.sampled_from((1, 3, 0xFFFE, 2, 0))), draw(st.integers(0, 65535)),
                      draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**32 - 1)),
                      draw(st.integers(0, 65535)), draw(st.sampled_from((0, 1, 8, 16, 24, 32, 64, 65535))))
    fmt += draw(st.binary(max_size=24))
    samples = draw(st.binary(max_size=64))
    size = draw(st.one_of(st.just(len(samples)), st.integers(0, 2**32 - 1)))
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", size) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


def flac_declaring(rate: int, total: int, *, channels: int = 1, bits: int = 16, tail: int = 0) -> bytes:
    """The seed FLAC with its STREAMINFO's rate, channels, sample size and sample count replaced."""
    info = rate << 44 | (channels - 1) << 41 | (bits - 1) << 36 | total
    head = bytearray(FLAC[:42])
    head[18:26] = info.to_bytes(8, "big")
    return bytes(head) + FLAC[42:42 + tail]


@st.composite
def flac_headers(draw) -> bytes:
    """A FLAC whose STREAMINFO fields are drawn: rates and lengths about the limits, or any."""
    rate = draw(st.one_of(st.sampled_from((0, 999, 1000, 16000, 44100, 384000, 384001)), st.integers(0, 2**20 - 1)))
    limit = int(audio.MAX_AUDIO_SECONDS * max(rate, 1))
    total = draw(st.one_of(st.integers(limit - 2, limit + 2), st.integers(0, 2**36 - 1)).filter(lambda t: 0 <= t < 2**36))
    return flac_declaring(rate, total, channels=draw(st.integers(1, 8)), bits=draw(st.integers(1, 32)),
                          tail=draw(st.integers(0, 64)))


@st.composite
def mp3_headers(draw) -> bytes:
    """A frame header drawn whole, then a Xing or Info tag (frame count drawn) where dr_mp3 reads
    one, with or without a CRC, after side information of each size."""
    header = bytes([0xFF, 0xE0 | draw(st.integers(0, 31)), draw(st.integers(0, 255)), draw(st.integers(0, 255))])
    gap = draw(st.sampled_from((9, 17, 32, 11, 19, 34, 0)))
    tag = draw(st.sampled_from((b"Xing", b"Info"))) + bytes([0, 0, 0, draw(st.integers(0, 255))])
    return header + bytes(gap) + tag + draw(st.integers(0, 2**32 - 1)).to_bytes(4, "big") + bytes(64)


clips = st.one_of(st.binary(max_size=256), mutated(), wav_headers(), flac_headers(), mp3_headers())
formats = st.one_of(st.none(), st.sampled_from(("wav", "mp3", "flac", "audio/mpeg", "ogg")), st.integers(),
                    st.text(max_size=8))


def read_or_refuse(data: bytes, fmt: object = None):
    try:
        return audio.from_bytes(data, fmt, "x")
    except AudioRefused as exc:
        assert str(exc) and exc.code
        return None


@FUZZ
@given(clips, formats)
@example(flac_declaring(16000, int(audio.MAX_AUDIO_SECONDS * 16000) + 1), None)        # one sample past the limit
@example(with_xing(mp3_bytes(tone(0.1)), 2**32 - 1), "mp3")                             # a Xing tag claiming days
def test_any_bytes_are_a_clip_or_refused(data, fmt):
    clip = read_or_refuse(data, fmt)
    if clip is not None:
        assert 0 < clip.seconds <= audio.MAX_AUDIO_SECONDS
        assert clip.format in audio.FORMATS and clip.format == audio.sniff(clip.data)
        assert len(clip.data) <= len(data) + CANONICAL_HEADER
        # dr_flac walks no metadata block, so it opens the stream and dr_mp3 never reads it instead
        assert clip.format != "flac" or clip.data[4] == 0x80


@FUZZ
@given(clips)
def test_an_accepted_clip_is_accepted_again_as_it_is_handed_on(data):
    """What goes to libmtmd passes the same checks (a canonical WAV rewritten is still itself)."""
    clip = read_or_refuse(data)
    if clip is not None:
        again = audio.from_bytes(clip.data, clip.format, "x")
        assert again.data == clip.data and again.seconds == clip.seconds


@FUZZ
@given(st.one_of(st.text(max_size=64), st.binary(max_size=64), st.integers(), st.none(),
                 clips.map(lambda b: __import__("base64").b64encode(b).decode())), formats)
def test_any_base64_is_a_clip_or_refused(data, fmt):
    try:
        read_base64(AUDIO, data, fmt, "x")
    except InputRefused as exc:
        assert str(exc) and exc.code


def peak_bytes(read, *args, **kwargs) -> int:
    tracemalloc.start()
    try:
        read(*args, **kwargs)
    except (AudioRefused, MultipartError, ApiError):
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clips)
def test_reading_a_clip_takes_memory_in_proportion_to_it(data):
    """No declaration read from the bytes sizes a buffer here: a few copies of the input at most."""
    assert peak_bytes(audio.from_bytes, data, None, "x") <= 4 * len(data) + 64 * 1024


# ---- multipart ------------------------------------------------------------------------------

def form(*parts: tuple[str, bytes, str | None]) -> bytes:
    out = b""
    for name, data, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{B}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{B}--\r\n".encode()


FORMS = (form(("model", b"tiny", None), ("file", WAV, "a.wav")),
         form(("model", b"tiny", None), ("file", MP3, "a.mp3"), ("response_format", b"verbose_json", None),
              ("timestamp_granularities[]", b"segment", None), ("stream", b"true", None)),
         form(("file", FLAC, "a.flac"), ("model", b"tiny", None), ("temperature", b"0", None),
              ("logit_bias", b'{"1": -100}', None)))
forms = st.one_of(mutated(FORMS), st.binary(max_size=512))
content_types = st.one_of(st.just(CT), st.sampled_from((None, "multipart/form-data", "application/json",
                                                        "multipart/form-data; boundary=", f"{CT}; charset=x",
                                                        'multipart/form-data; boundary="q"')),
                          st.text(max_size=80).map(lambda t: "multipart/form-data; boundary=" + t))


@FUZZ
@given(forms, content_types)
def test_any_body_is_a_form_or_refused_within_the_limits(body, content_type):
    try:
        parsed = parse_form(content_type, body, max_file_bytes=1 << 20)
    except MultipartError as exc:
        assert str(exc) and exc.param
        return
    assert len(parsed.fields) + len(parsed.files) <= MAX_PARTS
    assert sum(len(f) for f in parsed.files.values()) <= len(body)
    for value in parsed.fields.values():
        for one in value if isinstance(value, list) else [value]:
            assert len(one.encode()) <= MAX_FIELD_BYTES


@FUZZ
@given(forms, st.booleans())
def test_any_transcription_form_is_read_or_a_400(body, translate):
    try:
        ask = read_form(CT, body, translate=translate)
    except ApiError as exc:
        assert exc.status == 400 and exc.param
        return
    assert ask.body["model"] and ask.clip.seconds <= audio.MAX_AUDIO_SECONDS


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forms)
def test_reading_a_form_takes_memory_in_proportion_to_it(body):
    assert peak_bytes(read_form, CT, body, translate=False) <= 4 * len(body) + 64 * 1024
