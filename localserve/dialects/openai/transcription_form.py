"""The form of ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` read into a
:class:`TranscriptionAsk` (localserve/multipart.py parses the body; every refusal here a 400 naming
the field, in OpenAI's error shape).

OpenAI's fields: ``file`` (required: WAV, MP3 or FLAC, localserve/audio.py checks it),
``model`` (required), ``prompt``, ``language``, ``temperature``, ``response_format`` (json,
text, verbose_json, srt, vtt), ``stream`` (transcriptions only), ``timestamp_granularities[]``
(``segment`` only: there are no word timings), ``include[]`` and ``chunking_strategy`` (taken,
without effect). Extensions, as every dialect takes them: ``max_tokens``, ``seed``, ``top_k``,
``top_p``, ``min_p`` and ``logit_bias`` (a JSON object as the field's text)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from ...audio import MAX_AUDIO_BYTES, from_bytes, too_large
from ...audio_headers import AudioRefused
from ...conversation import Audio
from ...errors import ApiError
from ...multipart import FileTooLarge, Form, MultipartError, parse_form
from ..fields import invalid

RESPONSE_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
MAX_LANGUAGE = 32                   # "en", "pt-BR", "english": a short name, not a prompt
NUMBER_FIELDS = ("temperature", "top_p", "min_p")
INTEGER_FIELDS = ("max_tokens", "seed", "top_k")


@dataclass
class TranscriptionAsk:
    clip: Audio
    body: dict                      # what the shared readers read: model, stream, sampling fields
    response_format: str = "json"
    language: str | None = None
    prompt: str | None = None


def read_form(content_type: str | None, raw: bytes | bytearray, *, translate: bool) -> TranscriptionAsk:
    try:
        form = parse_form(content_type, raw, max_file_bytes=MAX_AUDIO_BYTES)
    except FileTooLarge as exc:            # the clip's own refusal, as an input_audio part past it gets
        refusal = too_large(exc.size)
        raise ApiError(400, f"invalid '{exc.param}': {refusal}", param=exc.param, code=refusal.code) from None
    except MultipartError as exc:
        raise ApiError(400, f"invalid '{exc.param}': {exc}", param=exc.param, code="invalid_multipart") from None
    clip = _clip(form)
    body: dict = {"model": _text(form, "model", required=True)}
    stream = _text(form, "stream")
    if stream is not None:
        if stream.lower() not in ("true", "false"):
            raise invalid("stream", "expected true or false")
        if stream.lower() == "true" and translate:
            raise invalid("stream", "translations are not streamed (as OpenAI's are not)")
        body["stream"] = stream.lower() == "true"
    for name in NUMBER_FIELDS + INTEGER_FIELDS:
        value = _text(form, name)
        if value is not None:
            body[name] = _number(name, value, integer=name in INTEGER_FIELDS)
    bias = _text(form, "logit_bias")
    if bias is not None:
        try:
            body["logit_bias"] = orjson.loads(bias)
        except orjson.JSONDecodeError:
            raise invalid("logit_bias", "expected a JSON object of token ids to biases") from None
    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise invalid("response_format", f"expected one of {', '.join(RESPONSE_FORMATS)}")
    granularities = form.fields.get("timestamp_granularities[]") or []
    if any(g != "segment" for g in granularities):
        raise invalid("timestamp_granularities[]", "only 'segment' is given: the model writes the transcript as "
                      "text, with no timings of its words (verbose_json has one segment spanning the clip)")
    language = _text(form, "language")
    if language is not None and (len(language) > MAX_LANGUAGE or not language.replace("-", "").isalpha()):
        raise invalid("language", "expected a language's code or name (ISO-639-1: en, de, ...)")
    return TranscriptionAsk(clip, body, response_format, language or None, _text(form, "prompt") or None)


def _clip(form: Form) -> Audio:
    upload = form.files.get("file")
    if upload is None:
        if "file" in form.fields:
            raise invalid("file", "expected a file part (with a filename), not a text field")
        raise invalid("file", "the form has no file: send the audio as the 'file' part")
    name = upload.filename.rsplit(".", 1)[-1].lower() if "." in upload.filename else None
    declared = name if name in ("wav", "mp3", "flac", "mpga", "mpeg", "wave") else None
    try:
        return from_bytes(bytes(upload.data), declared, "file")
    except AudioRefused as exc:
        raise ApiError(400, f"invalid 'file': {exc}", param="file", code=exc.code) from None


def _text(form: Form, name: str, *, required: bool = False) -> str | None:
    if name in form.files:
        raise invalid(name, "expected a text field, not a file")
    value = form.fields.get(name)
    if isinstance(value, list):
        raise invalid(name, "expected one value")
    if value is None and required:
        raise invalid(name, "this field is required")
    return value


def _number(name: str, value: str, *, integer: bool) -> int | float:
    try:
        return int(value) if integer else float(value)
    except ValueError:
        raise invalid(name, f"expected {'an integer' if integer else 'a number'}") from None
