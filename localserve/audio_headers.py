"""The structure of an audio file, read from its bytes before any decoder sees them (stdlib only).

libmtmd decodes audio with miniaudio's dr_wav, dr_mp3 and dr_flac, and sizes its sample buffer
from what the file *declares*, before reading a sample (mtmd-helper.cpp's decode_audio_from_buf:
``ma_decoder_get_length_in_pcm_frames`` then ``resize``): a FLAC STREAMINFO or an MP3's
Xing/Info tag that claims hours is hours of floats allocated, or a C++ exception that ends the
process. So each format is read here first, and only bytes whose declarations were checked go on:

- WAV is read whole here (RIFF chunks walked with their sizes checked against the bytes, at most
  MAX_WAV_CHUNKS of them, the ``fmt `` chunk's channels, rate, sample size and block alignment
  checked against each other) and rewritten as a plain canonical WAV of the same samples
  (:func:`canonical_wav`): the decoder only ever reads a header written here;
- MP3 must start (after ID3v2 tags, which are cut off) with an MPEG-1/2/2.5 Layer III frame
  header; every Xing/Info tag that sits where dr_mp3 reads one, inside a frame, must declare no
  more frames than :func:`read_mp3`'s caller allows; without a tag dr_mp3 decodes every frame to
  count them, so the durations of every frame header in the stream must come to no more (the
  length estimated from the first frame's bitrate let a 160 kbps first frame and 8 kbps ones
  after it pass as 300 s while they decoded to 5,900 s: 760 MB of floats for a 6 MB upload;
  walking the frames alone misses a second chain of short frames hidden in the data of long
  ones, which dr_mp3 follows when the long ones do not chain);
- FLAC must start (after ID3v2 tags, cut off) with ``fLaC`` and a STREAMINFO block whose sample
  count is known (not 0) and within the limit, and its metadata blocks must end within the bytes;
  only STREAMINFO goes on, flagged as the last block, then the frames. miniaudio tries dr_wav,
  dr_flac and dr_mp3 in turn until one opens the bytes, and dr_mp3 finds frames anywhere: a FLAC
  dr_flac could not open (a block running past the end, a last block never flagged) was decoded
  as the MP3 frames hidden in its padding (a 24 MB file declaring 1 s decoded to 24,000 s: 3 GB
  of floats and 20 s of CPU before the length was checked).

Each reader returns :class:`AudioFacts` (the bytes to hand on, their format, the duration the
header declares) or raises :class:`AudioRefused` saying why.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from .errors import InputRefused

MAX_CHANNELS = 8                 # as many as 7.1; dr_wav takes more, nothing here needs them
MIN_SAMPLE_RATE = 1000           # below this no speech survives; it would also be upsampled 16-fold or more
MAX_SAMPLE_RATE = 384000
MAX_WAV_CHUNKS = 64              # RIFF chunks walked before the data chunk (LIST, fact, cue, ...)
MAX_ID3_TAGS = 4                 # ID3v2 tags in a row before the audio
MAX_FLAC_BLOCKS = 128            # FLAC metadata blocks (STREAMINFO, SEEKTABLE, tags, pictures, padding, ...)

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"


class AudioRefused(InputRefused):
    """Why a clip is not taken; code: invalid_audio, unsupported_audio_format, audio_format_mismatch,
    audio_too_large, audio_too_long, audio_too_short, too_many_audio_clips, model_has_no_audio."""
    code = "invalid_audio"


@dataclass(frozen=True)
class AudioFacts:
    data: bytes            # what goes to libmtmd's decoder: a canonical WAV, an MP3 stream without ID3 tags,
                           # a FLAC stream of STREAMINFO and frames
    format: str            # "wav", "mp3", "flac"
    seconds: float         # the duration the header declares (MP3 without a tag: its frames walked)
    sample_rate: int
    channels: int
    decodes_to: float | None = None     # at most what the decoders make of it, where more than `seconds`

    @property
    def most_seconds(self) -> float:
        return self.seconds if self.decodes_to is None else max(self.seconds, self.decodes_to)


# ---- WAV ---------------------------------------------------------------------------------

def read_wav(data: bytes) -> AudioFacts:
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioRefused("the data is not a RIFF WAVE file")
    fmt, at = None, 12
    for _ in range(MAX_WAV_CHUNKS):
        if at + 8 > len(data):
            raise AudioRefused("the WAV file ends before its data chunk")
        kind, size = data[at:at + 4], struct.unpack_from("<I", data, at + 4)[0]
        body = at + 8
        if kind == b"data":
            if fmt is None:
                raise AudioRefused("the WAV file's data chunk comes before its fmt chunk")
            if size > len(data) - body:
                raise AudioRefused(f"the WAV data chunk declares {size} bytes but {len(data) - body} follow")
            return _wav_facts(fmt, data[body:body + size])
        if size > len(data) - body:
            raise AudioRefused(f"the WAV chunk {kind!r} declares {size} bytes but {len(data) - body} follow")
        if kind == b"fmt ":
            fmt = _wav_format(data[body:body + size])
        at = body + size + (size & 1)          # chunks are word-aligned
    raise AudioRefused(f"the WAV file has more than MAX_WAV_CHUNKS ({MAX_WAV_CHUNKS}) chunks before its data")


@dataclass(frozen=True)
class _WavFormat:
    tag: int               # _PCM or _FLOAT
    channels: int
    rate: int
    bits: int

    @property
    def block(self) -> int:
        return self.channels * self.bits // 8


def _wav_format(chunk: bytes) -> _WavFormat:
    if len(chunk) < 16:
        raise AudioRefused("the WAV fmt chunk is shorter than 16 bytes")
    tag, channels, rate, _byte_rate, block, bits = struct.unpack_from("<HHIIHH", chunk)
    if tag == _EXTENSIBLE:
        if len(chunk) < 40 or chunk[26:40] != _GUID_TAIL:
            raise AudioRefused("the WAV file's extensible format names no PCM or float subformat",
                               "unsupported_audio_format")
        tag = struct.unpack_from("<H", chunk, 24)[0]
    if tag not in (_PCM, _FLOAT):
        raise AudioRefused(f"the WAV file is encoded (format tag {tag}); only PCM and float WAV are read here",
                           "unsupported_audio_format")
    if (tag == _PCM and bits not in (8, 16, 24, 32)) or (tag == _FLOAT and bits not in (32, 64)):
        raise AudioRefused(f"the WAV file has {bits}-bit {'float' if tag == _FLOAT else 'PCM'} samples, "
                           "which are not read here", "unsupported_audio_format")
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioRefused(f"the WAV file has {channels} channels; 1 to MAX_CHANNELS ({MAX_CHANNELS}) are read")
    _check_rate(rate)
    found = _WavFormat(tag, channels, rate, bits)
    if block != found.block:
        raise AudioRefused(f"the WAV fmt chunk's block alignment ({block}) is not channels x sample bytes "
                           f"({found.block})")
    return found


# A float sample's top exponent byte (little-endian: the last of its 4 or 8 bytes) at or past
# these is a magnitude of 2**17 or more, infinite or NaN: libmtmd's log-mel of such a clip is
# infinite and the model's logits NaN (a 200 whose logprobs were null, its tokens noise).
_FLOAT_TOO_LARGE = {32: re.compile(rb"[\x48-\x7f\xc8-\xff]"), 64: re.compile(rb"[\x41-\x7f\xc1-\xff]")}


def _wav_facts(fmt: _WavFormat, samples: bytes) -> AudioFacts:
    frames = len(samples) // fmt.block
    if frames == 0:
        raise AudioRefused("the WAV file holds no samples", "audio_too_short")
    size = fmt.bits // 8
    if fmt.tag == _FLOAT and _FLOAT_TOO_LARGE[fmt.bits].search(samples[size - 1:frames * fmt.block:size]):
        raise AudioRefused("the WAV file's float samples include NaN, infinity or values past +-131072 "
                           "(float audio runs from -1 to 1)")
    return AudioFacts(canonical_wav(fmt.tag, fmt.channels, fmt.rate, fmt.bits, samples[:frames * fmt.block]),
                      "wav", frames / fmt.rate, fmt.rate, fmt.channels)


def canonical_wav(tag: int, channels: int, rate: int, bits: int, samples: bytes) -> bytes:
    """A WAV of a 16-byte fmt chunk and the data chunk, nothing else."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples))
    return b"RIFF" + struct.pack("<I", len(body) + len(samples)) + body + samples


def _check_rate(rate: int) -> None:
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioRefused(f"the sample rate is {rate} Hz; {MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz are read")


# ---- ID3v2 -------------------------------------------------------------------------------

def without_id3(data: bytes) -> bytes:
    """The bytes after the ID3v2 tags at their start (each tag's syncsafe size checked)."""
    for _ in range(MAX_ID3_TAGS):
        if not data.startswith(b"ID3"):
            return data
        if len(data) < 10 or any(b & 0x80 for b in data[6:10]):
            raise AudioRefused("the ID3 tag's header is damaged")
        size = 10 + (data[6] << 21 | data[7] << 14 | data[8] << 7 | data[9]) + (10 if data[5] & 0x10 else 0)
        if size > len(data):
            raise AudioRefused(f"the ID3 tag declares {size} bytes but the file has {len(data)}")
        data = data[size:]
    raise AudioRefused(f"more than MAX_ID3_TAGS ({MAX_ID3_TAGS}) ID3 tags in a row")


# ---- MP3 -------------------------------------------------------------------------------

_MPEG1_RATES = (44100, 48000, 32000)
_BITRATES_V1 = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_BITRATES_V2 = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)


# where a frame header dr_mp3 decodes could start (its hdr_valid: Layers I, II and III, MPEG-2.5
# for Layer III only, free format too; a bitrate that is not 15, a rate index that is not 3),
# every such place, overlapping ones included (a lookahead)
_MP3_SYNC = re.compile(rb"(?=\xff[\xe2\xe3\xf2-\xf7\xfa-\xff][\x00-\x0b\x10-\x1b\x20-\x2b\x30-\x3b\x40-\x4b"
                       rb"\x50-\x5b\x60-\x6b\x70-\x7b\x80-\x8b\x90-\x9b\xa0-\xab\xb0-\xbb\xc0-\xcb\xd0-\xdb\xe0-\xeb])")


_MP3_LAYER_III = re.compile(rb"\xff[\xe2\xe3\xf2\xf3\xfa\xfb]")


def _header_seconds(b1: int, b2: int) -> float:
    """The duration of the frame whose header's second and third bytes these are (dr_mp3's
    hdr_frame_samples over hdr_sample_rate_hz): 8 ms at the least (Layer I at 48 kHz)."""
    rate = _MPEG1_RATES[(b2 >> 2) & 3] >> (not b1 & 0x08) >> (not b1 & 0x10)
    samples = 384 if b1 & 6 == 6 else 576 if b1 & 14 == 2 else 1152
    return samples / rate


@dataclass(frozen=True)
class _Mp3Frame:
    rate: int
    samples: int           # per frame: 1152 (MPEG-1) or 576 (MPEG-2 and 2.5)
    side_info: int         # bytes between the header (and CRC) and a Xing tag
    crc: bool
    kbps: int
    size: int              # bytes, the header and its padding byte included

    @property
    def seconds(self) -> float:
        return self.samples / self.rate


def _mp3_frame(data: bytes, at: int) -> _Mp3Frame | None:
    """The Layer III frame header at `at`, or None where there is none."""
    if at < 0 or at + 4 > len(data) or data[at] != 0xFF or data[at + 1] & 0xE0 != 0xE0:
        return None
    version, layer = (data[at + 1] >> 3) & 3, (data[at + 1] >> 1) & 3
    bitrate, rate_index = data[at + 2] >> 4, (data[at + 2] >> 2) & 3
    if version == 1 or layer != 1 or bitrate in (0, 15) or rate_index == 3:
        return None
    mono = (data[at + 3] >> 6) == 3
    divisor = {3: 1, 2: 2, 0: 4}[version]
    mpeg1 = version == 3
    rate, kbps = _MPEG1_RATES[rate_index] // divisor, (_BITRATES_V1 if mpeg1 else _BITRATES_V2)[bitrate]
    size = (144 if mpeg1 else 72) * kbps * 1000 // rate + ((data[at + 2] >> 1) & 1)
    return _Mp3Frame(rate, 1152 if mpeg1 else 576, (17 if mono else 32) if mpeg1 else (9 if mono else 17),
                     not data[at + 1] & 1, kbps, size)


def read_mp3(data: bytes, max_seconds: float) -> AudioFacts:
    """An MP3 whose first frame is Layer III and whose Xing/Info tags declare at most max_seconds."""
    stream = without_id3(data)
    first = _mp3_frame(stream, 0)
    if first is None:
        raise AudioRefused("the MP3 data does not start with an MPEG Layer III frame (free-format, Layer I and "
                           "Layer II streams are not read here)")
    for tag in (b"Xing", b"Info"):
        at = stream.find(tag)
        while at >= 0:
            _check_tag(stream, at, max_seconds)
            at = stream.find(tag, at + 1)
    decodable = _mp3_decodable_seconds(stream, max_seconds)
    if decodable > max_seconds:
        raise AudioRefused(f"the MP3's frame headers come to {decodable:.0f} seconds or more, more than "
                           f"{max_seconds:g} are read", "audio_too_long")
    return AudioFacts(stream, "mp3", _mp3_walked_seconds(stream), first.rate, 1, decodable)


def _mp3_decodable_seconds(stream: bytes, max_seconds: float) -> float:
    """At most how long dr_mp3 could decode the stream: every frame it decodes starts at a frame
    header, so the durations of every place a header could start bound it, however the frames
    are chained (a chain hidden in another's data included). An honest stream adds a few
    stray patterns in its data. Stops once past max_seconds (a frame is at least 8 ms)."""
    seconds = 0.0
    for found in _MP3_SYNC.finditer(stream):
        at = found.start()
        seconds += _header_seconds(stream[at + 1], stream[at + 2])
        if seconds > max_seconds:
            break
    return seconds


def _mp3_walked_seconds(stream: bytes) -> float:
    """The stream's length: its frames walked one after another (past a damaged stretch to the
    next header); what a transcription's duration says."""
    seconds, at = 0.0, 0
    while at < len(stream):
        frame = _mp3_frame(stream, at)
        if frame is not None:
            seconds += frame.seconds
            at += frame.size
            continue
        found = _MP3_LAYER_III.search(stream, at + 1)
        at = found.start() if found else len(stream)
    return seconds


def _check_tag(stream: bytes, at: int, max_seconds: float) -> None:
    """A Xing/Info tag at `at` that dr_mp3 would read (right after a frame's side information)
    declares its frame count: at most max_seconds of that frame's samples."""
    for crc in (False, True):
        for side_info in (9, 17, 32):
            frame = _mp3_frame(stream, at - 4 - side_info - (2 if crc else 0))
            if frame is None or frame.crc != crc or frame.side_info != side_info or at + 12 > len(stream):
                continue
            if not stream[at + 7] & 1:
                continue
            frames = struct.unpack_from(">I", stream, at + 8)[0]
            seconds = frames * frame.samples / frame.rate
            if seconds > max_seconds:
                raise AudioRefused(f"the MP3's {stream[at:at + 4].decode()} tag declares {seconds:.0f} seconds, "
                                   f"more than {max_seconds:g} are read", "audio_too_long")


# ---- FLAC --------------------------------------------------------------------------------

def read_flac(data: bytes) -> AudioFacts:
    """A FLAC stream whose STREAMINFO declares its sample count, rate and channels."""
    stream = without_id3(data)
    if len(stream) < 8 + 34 or stream[:4] != b"fLaC":
        raise AudioRefused("the data is not a FLAC stream")
    block_type, length = stream[4] & 0x7F, int.from_bytes(stream[5:8], "big")
    if block_type != 0 or length != 34:
        raise AudioRefused("the FLAC stream does not start with its STREAMINFO block")
    info = int.from_bytes(stream[18:26], "big")        # rate 20 bits, channels 3, bits 5, samples 36
    rate, channels, bits, total = info >> 44, ((info >> 41) & 7) + 1, ((info >> 36) & 31) + 1, info & (2**36 - 1)
    _check_rate(rate)
    if not 4 <= bits <= 32:
        raise AudioRefused(f"the FLAC stream has {bits}-bit samples, which are not read here",
                           "unsupported_audio_format")
    if total == 0:
        raise AudioRefused("the FLAC stream does not declare its length (STREAMINFO's sample count is 0); "
                           "re-encode it with the count, or send WAV")
    frames = _flac_frames_start(stream)
    return AudioFacts(b"fLaC" + bytes([0x80]) + stream[5:42] + stream[frames:], "flac", total / rate, rate, channels)


def _flac_frames_start(stream: bytes) -> int:
    """Where the frames start: past the metadata blocks, each within the bytes, the last one flagged.
    Only STREAMINFO goes on, flagged last (read_flac): dr_flac then never walks a block, so it
    never fails to open the stream, and miniaudio never hands the bytes to dr_mp3 instead."""
    at, last = 4, False
    for _ in range(MAX_FLAC_BLOCKS):
        if at + 4 > len(stream):
            break
        last, size = bool(stream[at] & 0x80), int.from_bytes(stream[at + 1:at + 4], "big")
        at += 4 + size
        if at > len(stream):
            break
        if last:
            return at
    else:
        raise AudioRefused(f"the FLAC stream has more than MAX_FLAC_BLOCKS ({MAX_FLAC_BLOCKS}) metadata blocks")
    raise AudioRefused("the FLAC stream's metadata blocks run past its end (no last block within the file)")
