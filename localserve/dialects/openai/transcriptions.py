"""OpenAI's speech to text: ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``.

The form (transcription_form.py) names a model whose projector has an audio encoder and a clip.
The prompt is the model's own: its chat template renders one user turn holding the clip and an
instruction (TRANSCRIBE or TRANSLATE, the form's ``language`` and ``prompt`` added as context),
so an audio chat model answers with the transcript as it would in a chat; the clip goes through
the same path as a chat's input_audio part (decoded once, evaluated between decode steps,
cached by digest). The answer in the ``response_format`` asked for: ``json`` ({text, usage}),
``text``, ``verbose_json`` ({task, language, duration, text, segments, usage}: one segment for
the whole clip, as there are no timings), ``srt`` and ``vtt`` (one cue); with ``stream=true``
(transcriptions) OpenAI's events ``transcript.text.delta`` and then ``transcript.text.done``
with the usage, as ``data:`` lines.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...conversation import Message, Text
from ...errors import ApiError
from ...generation import Chunk, Finished, GenerationOutput, GenerationRequest, SamplingParams
from ...prompt.build import ChatInput, build_chat_request
from ..exchange import Exchange
from ..failures import prompt_refusals
from ..fields import read_int, read_sampling
from ..job_events import wait_for_output
from ..pump import PREFILL_COMMENT, StreamShape, sse
from ..request_cycle import Reply, serve_generation
from ..services import Services
from .errors import openai_error_body
from .transcription_form import TranscriptionAsk, read_form

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel

TRANSCRIBE = "Transcribe the audio: write exactly what is said, nothing else."
TRANSLATE = "Translate what is said in the audio into English: write the English text, nothing else."
MAX_TRANSCRIPT_TOKENS = 4096         # a transcript's tokens when the form sets no max_tokens (extension)
DEFAULT_TEMPERATURE = 0.0            # OpenAI's when the form sends none (the likeliest transcript), not a chat's
_ARROWS = re.compile(r"-{2,}>")        # a cue's timing arrow, "-->", and any longer run ending in one
TEXT_TYPES = {"text": "text/plain; charset=utf-8", "srt": "application/x-subrip; charset=utf-8",
              "vtt": "text/vtt; charset=utf-8"}


def handle(services: Services, exchange: Exchange, *, translate: bool = False) -> None:
    request = exchange.request
    ask = read_form(request.header("content-type"), request.body, translate=translate)

    def reply(model: ServedModel, body: dict) -> Reply:
        with prompt_refusals("file"):
            gen_request = build(model, ask, translate, exchange.request_id)
        return Reply(gen_request, shape=lambda gen: TranscriptEvents(gen_request),
                     deliver=None if body.get("stream") else lambda gen: deliver(exchange, ask, translate, gen_request,
                                                                                 wait_for_output(exchange.writer, gen)))

    serve_generation(exchange, services, reply, shape_type=TranscriptEvents, body=ask.body)


def build(model: ServedModel, ask: TranscriptionAsk, translate: bool, request_id: str) -> GenerationRequest:
    instruction = TRANSLATE if translate else TRANSCRIBE
    if ask.language and not translate:
        instruction += f" The speech is in {ask.language}."
    if ask.prompt:
        instruction += f"\nContext (earlier words, names, spellings): {ask.prompt}"
    chat = ChatInput(messages=[Message("user", (Text(instruction), ask.clip))])    # fitted by build_chat_request:
    # on a model without an audio encoder, 400 model_has_no_audio naming 'file'
    max_tokens = read_int(ask.body, "max_tokens", low=1, default=MAX_TRANSCRIPT_TOKENS)
    sampling = read_sampling(ask.body, model.chat.engine.n_vocab,
                             defaults=SamplingParams(temperature=DEFAULT_TEMPERATURE))
    return build_chat_request(model.chat, chat, sampling,
                              max_tokens=max_tokens, stop=[],
                              label=f"{'translation' if translate else 'transcription'} {request_id}")


def usage(output: GenerationOutput) -> dict:
    audio = output.audio_tokens
    return {"type": "tokens", "input_tokens": output.prompt_tokens,
            "input_token_details": {"text_tokens": output.prompt_tokens - audio, "audio_tokens": audio},
            "output_tokens": output.completion_tokens, "total_tokens": output.prompt_tokens + output.completion_tokens}


def deliver(exchange: Exchange, ask: TranscriptionAsk, translate: bool, request: GenerationRequest,
            output: GenerationOutput) -> None:
    """The whole answer in the form's response_format (the job is over: nothing to hand back)."""
    text = output.content.strip()
    seconds = round(ask.clip.seconds, 3)
    if ask.response_format in TEXT_TYPES:
        body = text + "\n" if ask.response_format == "text" else subtitles(ask.response_format, text, seconds)
        exchange.writer.send(200, body.encode("utf-8"), content_type=TEXT_TYPES[ask.response_format])
        return
    if ask.response_format == "json":
        exchange.send_json({"text": text, "usage": usage(output)})
        return
    segment = {"id": 0, "seek": 0, "start": 0.0, "end": seconds, "text": text,
               "tokens": [], "temperature": request.sampling.temperature, "avg_logprob": 0.0,
               "compression_ratio": 0.0, "no_speech_prob": 0.0}
    exchange.send_json({"task": "translate" if translate else "transcribe",
                        "language": "english" if translate else (ask.language or "unknown"),
                        "duration": seconds, "text": text, "segments": [segment],
                        "usage": {"type": "duration", "seconds": seconds}})


def subtitles(response_format: str, text: str, seconds: float) -> str:
    """The transcript as one SRT or WebVTT cue spanning the clip. A blank line ends a cue and
    "-->" starts a timing line, so neither stays in the text: a model's transcript (of audio
    that says so) cannot add cues of its own."""
    lines = [_ARROWS.sub("->", line) for line in text.splitlines() if line.strip()]
    cue = "\n".join(lines)
    if response_format == "srt":
        return f"1\n{_stamp(0, ',')} --> {_stamp(seconds, ',')}\n{cue}\n\n"
    return f"WEBVTT\n\n{_stamp(0, '.')} --> {_stamp(seconds, '.')}\n{cue}\n\n"


def _stamp(seconds: float, comma: str) -> str:
    ms = int(round(seconds * 1000))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{comma}{ms % 1000:03d}"


class TranscriptEvents(StreamShape):
    """Runtime events → transcript.text.delta frames, then transcript.text.done (the pump writes them)."""
    done = False

    def __init__(self, request: GenerationRequest):
        self.request = request
        self.text: list[str] = []

    def feed(self, event: object) -> list[bytes]:
        if isinstance(event, Chunk) and not event.reasoning and event.text:
            self.text.append(event.text)
            return [sse({"type": "transcript.text.delta", "delta": event.text, "logprobs": None})]
        if isinstance(event, Finished) and event.output is not None:
            return [sse({"type": "transcript.text.done", "text": "".join(self.text).strip(), "logprobs": None,
                         "usage": usage(event.output)})]
        return []

    def fail(self, error: ApiError) -> list[bytes]:
        return [sse(openai_error_body(error))]

    def keepalive(self) -> list[bytes]:
        return [PREFILL_COMMENT]

    def end(self) -> list[bytes]:
        return []
