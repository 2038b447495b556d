"""localserve/audio.py and audio_headers.py on bytes alone: every accepted format read with its
length; the declared format checked against the bytes; WAV chunks walked with their sizes
checked and rewritten canonical; the declarations libmtmd's decoders would trust (an MP3's
Xing/Info frame count, a FLAC STREAMINFO sample count) held to MAX_AUDIO_SECONDS before any
decoder runs; a FLAC's metadata chain walked to its last block and handed on as STREAMINFO alone; other containers refused by name; the byte limit before base64 is decoded."""

from __future__ import annotations

import base64
import struct

import pytest

from localserve import audio, audio_headers
from localserve.audio_headers import MAX_WAV_CHUNKS, AudioRefused, canonical_wav, read_mp3, read_wav
from localserve.media_checks import AUDIO, read_base64
from tinyaudio import flac_bytes, flac_with_blocks, mp3_bytes, silent_mp3_frames, tone, wav_bytes, with_xing

CLIP = wav_bytes(tone(0.5))


def refused(data: bytes, fmt: str | None = None) -> AudioRefused:
    with pytest.raises(AudioRefused) as caught:
        audio.from_bytes(data, fmt, "x")
    return caught.value


@pytest.mark.parametrize("data, fmt, seconds", [
    (CLIP, "wav", 0.5), (wav_bytes(tone(0.25, rate=8000), rate=8000, bits=8), "wav", 0.25),
    (wav_bytes(tone(1.0) * 2, channels=2, bits=-32), "wav", 1.0), (wav_bytes(tone(0.5), bits=32), "wav", 0.5),
    (flac_bytes(tone(0.75)), "flac", 0.75), (mp3_bytes(tone(1.0)), "mp3", None),
    (b"ID3\x03\x00\x00\x00\x00\x00\x05hello" + mp3_bytes(tone(1.0)), "mp3", None),
    (b"ID3\x03\x00\x00\x00\x00\x00\x00" + flac_bytes(tone(0.5)), "flac", 0.5),
])
def test_accepted_formats_with_their_length(data, fmt, seconds):
    clip = audio.from_bytes(data, fmt, "x")
    assert clip.format == fmt and clip.where == "x"
    if seconds is not None:
        assert clip.seconds == pytest.approx(seconds)
    else:
        assert 0.8 < clip.seconds < 1.3          # estimated from the bitrate
    assert not clip.data.startswith(b"ID3")    # tags cut off: the decoder sees the stream


def test_wav_is_rewritten_canonical_and_the_same_clip_hashes_the_same():
    padded = CLIP[:12] + b"LIST" + struct.pack("<I", 5) + b"abcde\x00" + CLIP[12:]
    padded = padded[:4] + struct.pack("<I", len(padded) - 8) + padded[8:]
    assert audio.from_bytes(padded).data == audio.from_bytes(CLIP).data == CLIP
    assert audio.from_bytes(padded).digest == audio.from_bytes(CLIP).digest


@pytest.mark.parametrize("declared", ["wav", "WAV", "audio/wav", "x-wav", "wave", None])
def test_a_declared_format_may_name_it_many_ways(declared):
    assert audio.from_bytes(CLIP, declared).format == "wav"


def test_a_declared_format_must_agree_with_the_bytes():
    assert refused(CLIP, "mp3").code == "audio_format_mismatch"
    assert refused(CLIP, "ogg").code == "unsupported_audio_format"
    assert refused(CLIP, 3).code == "invalid_audio"


@pytest.mark.parametrize("data, named", [(b"OggS" + bytes(40), "Ogg"), (b"\x1a\x45\xdf\xa3" + bytes(40), "WebM"),
                                         (bytes(4) + b"ftypM4A " + bytes(40), "MP4"),
                                         (b"FORM\x00\x00\x00\x10AIFF" + bytes(40), "AIFF"),
                                         (b"RIFF\x00\x00\x00\x10WEBPVP8 " + bytes(40), "RIFF"),
                                         (b"hello world, not audio", "no audio format")])
def test_other_containers_are_refused_by_name(data, named):
    error = refused(data)
    assert error.code == "unsupported_audio_format" and named.lower() in str(error).lower()


def riff(*chunks: bytes) -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def chunk(kind: bytes, data: bytes, size: int | None = None) -> bytes:
    return kind + struct.pack("<I", len(data) if size is None else size) + data + (b"\x00" if len(data) & 1 else b"")


def fmt(tag=1, channels=1, rate=16000, bits=16, block=None) -> bytes:
    block = channels * bits // 8 if block is None else block
    return chunk(b"fmt ", struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits))


@pytest.mark.parametrize("data, says", [
    (riff(fmt(), chunk(b"data", b"\x00\x01" * 10, size=1 << 31)), "declares"),      # data past the end
    (riff(chunk(b"data", b"\x00\x01" * 10), fmt()), "before its fmt"),
    (riff(fmt(tag=2)), "encoded"),                                                   # ADPCM
    (riff(fmt(bits=12)), "12-bit"),
    (riff(fmt(channels=0)), "channels"), (riff(fmt(channels=9)), "channels"),
    (riff(fmt(rate=0)), "sample rate"), (riff(fmt(rate=999)), "sample rate"), (riff(fmt(rate=10 ** 6)), "sample rate"),
    (riff(fmt(block=7)), "block alignment"),
    (riff(fmt(), chunk(b"data", b"\x00")), "no samples"),
    (riff(fmt()), "ends before"),
    (riff(fmt(), chunk(b"JUNK", b"", size=1 << 30)), "declares"),
    (riff(*[chunk(b"JUNK", b"")] * (MAX_WAV_CHUNKS + 1), fmt(), chunk(b"data", b"\x00\x00")), "MAX_WAV_CHUNKS"),
])
def test_wav_structure_is_checked_before_anything_is_made_of_it(data, says):
    with pytest.raises(AudioRefused, match=says):
        read_wav(data)


def test_wav_sizes_at_the_edges_are_taken():
    assert read_wav(riff(fmt(), chunk(b"data", b"\x00\x01\x02"))).seconds == 1 / 16000   # half a frame left off
    assert read_wav(riff(fmt(rate=1000), chunk(b"data", b"\x00\x00"))).sample_rate == 1000
    assert read_wav(riff(*[chunk(b"JUNK", b"")] * (MAX_WAV_CHUNKS - 2), fmt(), chunk(b"data", b"\x00\x00"))).seconds
    extensible = struct.pack("<HHIIHHHHIH", 0xFFFE, 1, 16000, 32000, 2, 16, 22, 16, 4, 1) + \
        b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
    facts = read_wav(riff(chunk(b"fmt ", extensible), chunk(b"data", b"\x00\x00" * 4)))
    assert facts.data == canonical_wav(1, 1, 16000, 16, b"\x00\x00" * 4)


def test_an_mp3_s_xing_tag_may_not_declare_more_than_the_limit():
    mp3 = mp3_bytes(tone(1.0))
    frames = int(audio.MAX_AUDIO_SECONDS * 16000 / 576)                 # MPEG-2: 576 samples a frame
    assert audio.from_bytes(with_xing(mp3, frames), "mp3")
    error = refused(with_xing(mp3, frames + 2), "mp3")
    assert error.code == "audio_too_long" and "Xing" in str(error)
    assert refused(with_xing(mp3, 2 ** 32 - 1)).code == "audio_too_long"
    # a tag where dr_mp3 would not read one (not after a frame's side information) is audio data
    assert audio.from_bytes(mp3[:100] + b"Xing\x00\x00\x00\x01\xff\xff\xff\xff" + mp3[112:], "mp3")


def float64_wav(samples: list[float]) -> bytes:
    data = struct.pack(f"<{len(samples)}d", *samples)
    return riff(chunk(b"fmt ", struct.pack("<HHIIHH", 3, 1, 16000, 16000 * 8, 8, 64)), chunk(b"data", data))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 3e38, 131072.0, -131072.0])
def test_float_samples_that_make_the_logits_nan_are_refused(bad):
    """A float WAV of NaN, infinity or 1e18 went through: the log-mel was infinite, the logits NaN,
    and the 200 carried null logprobs and noise. Float audio runs from -1 to 1; 2**17 is far
    past it and far below what overflows (1e16 still decoded)."""
    samples = tone(0.1)[:100] + [bad] + tone(0.1)[:100]
    assert "NaN, infinity" in str(refused(wav_bytes(samples, bits=-32)))
    assert "NaN, infinity" in str(refused(float64_wav(samples)))
    for good in (131071.0, -2.5, 1e-45):
        samples[100] = good
        assert audio.from_bytes(wav_bytes(samples, bits=-32)) and audio.from_bytes(float64_wav(samples))


def mpeg25_frame(kbps_index: int, size: int) -> bytes:
    """An MPEG-2.5 Layer III mono frame at 8 kHz of silence (all side information zero)."""
    return bytes([0xFF, 0xE3, kbps_index << 4 | 0x08, 0xC0]) + bytes(size - 4)


def test_an_mp3_s_length_is_its_frames_not_its_first_frame_s_bitrate():
    """A 160 kbps first frame and 8 kbps frames after it: read as 200 KB at 160 kbps (10 s) it
    decoded to 20 times that (a 6 MB upload was 760 MB of floats before its length was checked)."""
    first, dense = mpeg25_frame(14, 1440), mpeg25_frame(1, 72)          # 160 and 8 kbps: 72 ms each
    error = pytest.raises(AudioRefused, read_mp3, first + dense * 2760, 10.0).value
    assert error.code == "audio_too_long" and "frame headers" in str(error)
    assert read_mp3(first + dense * 100, 10.0).seconds == pytest.approx(101 * 0.072)
    assert read_mp3(first + bytes(5000) + dense, 10.0).seconds == pytest.approx(2 * 0.072)   # a damaged stretch
    mp3 = mp3_bytes(tone(1.0))
    assert read_mp3(mp3 + b"TAG" + bytes(125), 10.0).seconds == pytest.approx(read_mp3(mp3, 10.0).seconds)


def test_a_chain_of_frames_hidden_in_another_s_data_is_counted():
    """Long frames that do not chain for dr_mp3 (MPEG-2.5 at 8 kHz and MPEG-2 at 16 kHz in turn)
    and a chain of 8 kbps frames in their data, 36 bytes off: dr_mp3 follows the hidden chain (a
    4 MB upload walked as 200 s decoded to 4,000 s), so every header counts."""
    data = bytearray(200_000)
    for at in range(36, len(data) - 72, 72):
        data[at:at + 4] = mpeg25_frame(1, 4)
    at, turn = 0, 0
    while at + 1440 <= len(data):
        data[at:at + 4] = bytes([0xFF, 0xE3 if turn == 0 else 0xF3, 0xE8, 0xC0])
        at, turn = at + (1440 if turn == 0 else 720), turn ^ 1
    assert pytest.raises(AudioRefused, read_mp3, bytes(data[:at]), 20.0).value.code == "audio_too_long"
    # dr_mp3 decodes Layer I and free-format frames too: hidden ones count (3,000 of 8.7 ms)
    hidden = mpeg25_frame(14, 1440) + b"\xff\xff\x00" * 3000
    assert pytest.raises(AudioRefused, read_mp3, hidden, 20.0).value.code == "audio_too_long"


def test_an_mp3_must_start_with_a_layer_iii_frame():
    assert "Layer III" in str(refused(b"\xff\xfd\x90\x00" + bytes(100)))        # Layer I
    assert "Layer III" in str(refused(b"\xff\xf1\x50\x80" + bytes(100)))        # AAC in ADTS
    assert "ID3" in str(refused(b"ID3\x03\x00\x00\x7f\x7f\x7f\x7f" + bytes(20)))  # the tag runs past the end


def test_flac_streaminfo_must_declare_a_known_length_within_the_limit():
    samples = tone(0.1)
    limit = int(audio.MAX_AUDIO_SECONDS * 16000)
    assert audio.from_bytes(flac_bytes(samples, declared=limit)).seconds == audio.MAX_AUDIO_SECONDS
    assert refused(flac_bytes(samples, declared=limit + 1)).code == "audio_too_long"
    assert refused(flac_bytes(samples, declared=2 ** 36 - 1)).code == "audio_too_long"
    assert "does not declare its length" in str(refused(flac_bytes(samples, declared=0)))
    assert "STREAMINFO" in str(refused(b"fLaC\x04\x00\x00\x22" + bytes(34)))


def test_the_byte_limit_is_held_before_base64_is_decoded(monkeypatch):
    monkeypatch.setattr(audio, "MAX_AUDIO_BYTES", 1000)
    assert refused_b64("A" * 1400).code == "audio_too_large"
    small = wav_bytes(tone(0.02))                 # 320 frames: 684 bytes
    assert read_base64(AUDIO, base64.b64encode(small).decode(), "wav").seconds == pytest.approx(0.02)
    assert refused_b64("not base64 at all!").code == "invalid_audio"
    assert refused_b64(12).code == "invalid_audio"


def refused_b64(data) -> AudioRefused:
    with pytest.raises(AudioRefused) as caught:
        read_base64(AUDIO, data, "wav")
    return caught.value


def test_a_clip_past_max_audio_seconds_is_refused(monkeypatch):
    monkeypatch.setattr(audio, "MAX_AUDIO_SECONDS", 0.4)
    assert refused(CLIP).code == "audio_too_long"


PADDING, SEEKTABLE, COMMENT = 1, 3, 4


def test_a_flac_dr_flac_cannot_open_is_refused_before_dr_mp3_reads_it_instead():
    """miniaudio hands bytes dr_flac cannot open to dr_mp3, which finds frames anywhere: a FLAC
    declaring 1 s whose metadata chain never ends (no last block; a block past the end) decoded
    as the 24,000 s of MP3 frames in its padding (3 GB of floats for a 24 MB upload)."""
    flac, hidden = flac_bytes(tone(1.0)), silent_mp3_frames(20.0)
    for bad in (flac_with_blocks(flac, [(PADDING, hidden)], tail=b"\x00\x00"),
                flac_with_blocks(flac, [(PADDING, hidden)], tail=b""),
                flac_with_blocks(flac, [(SEEKTABLE, bytes(18)), (PADDING, hidden)])[:-len(flac[42:]) - 10]):
        assert "past its end" in str(refused(bad, "flac"))
    many = flac_with_blocks(flac, [(PADDING, b"")] * (audio_headers.MAX_FLAC_BLOCKS - 1))
    assert audio.from_bytes(many).seconds == pytest.approx(1.0)
    assert "MAX_FLAC_BLOCKS" in str(refused(flac_with_blocks(flac, [(PADDING, b"")] * audio_headers.MAX_FLAC_BLOCKS)))


def test_a_flac_goes_on_as_streaminfo_alone_and_its_frames():
    """dr_flac then walks no block: it opens what it is handed, and dr_mp3 never sees it."""
    flac = flac_bytes(tone(1.0))
    blocks = [(SEEKTABLE, bytes(18)), (COMMENT, b"\x00" * 8), (PADDING, silent_mp3_frames(20.0))]
    clip = audio.from_bytes(flac_with_blocks(flac, blocks), "flac")
    assert clip.data == flac and clip.seconds == pytest.approx(1.0)
    tagged = b"ID3\x03\x00\x00\x00\x00\x00\x00" + flac_with_blocks(flac, blocks)
    assert audio.from_bytes(tagged).data == flac
