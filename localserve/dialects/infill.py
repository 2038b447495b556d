"""llama-server's POST /infill: code completion for editors (llama.vim, llama.vscode).

The request is llama-server's: the text before the cursor (`input_prefix`, plus `prompt`, the
cursor line's start), after it (`input_suffix`), other files (`input_extra`), and the editor's
limits: `n_predict` (0: only put the prompt in the cache, as llama.vim does to warm it with new
context), `n_indent` (end before a new line indented less), `t_max_predict_ms` (past it, end at
the next line break). `samplers`, `cache_prompt` and `t_max_prompt_ms` are read and checked but
change nothing: the sampler chain is the usual one, the prompt cache is always on, and
llama-server does not implement a prompt time limit either. The answer is llama-server's
completion object, `response_fields` picking fields by path; a stream is its `data:` lines,
each a piece of content, the last one the whole object with `"stop": true`, and no [DONE].
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import ApiError
from .openai.errors import openai_error_body
from ..generation import Chunk, Finished, GenerationOutput, GenerationRequest
from ..prompt.build import ChatModel, check_fits, check_grammar
from ..prompt.fim import ExtraFile, FimInput
from .exchange import Exchange, RouteTable
from .fields import invalid, kind_of, read_bool, read_int, read_sampling, read_stop, read_str
from .fim import fills_the_middle, fim_prompt
from .pump import PREFILL_COMMENT, StreamShape, sse
from .request_cycle import Reply, serve_generation
from .services import Services

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ..models.served import ServedModel


# The most input_extra chunks one request may carry (llama.vim sends 16 by default, 64 at most
# in its examples): each is tokenized on the connection's thread.
MAX_EXTRA_CHUNKS = 1024
# The longest input_extra filename taken, in characters (Linux's PATH_MAX): a name is tokenized
# whole, in the repository layout, never trimmed as texts are.
MAX_EXTRA_FILENAME_CHARS = 4096


@dataclass
class InfillPlan:
    request: GenerationRequest
    settings: dict              # what llama-server reports as generation_settings
    user_stops: list[str]
    response_fields: list[str] | None


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/infill", "POST", partial(handle, services))


def handle(services: Services, exchange: Exchange) -> None:
    def reply(model: ServedModel, body: dict) -> Reply:
        plan = read_request(model.chat, model.model_id, body, exchange.request_id)
        final = InfillFinal(plan, model.model_id, model.chat)
        return Reply(plan.request, shape=lambda gen: InfillChunks(final), whole=final.body)

    serve_generation(exchange, services, reply)


def read_request(chat_model: ChatModel, model_id: str, body: dict, request_id: str) -> InfillPlan:
    fim_input = FimInput(prefix=_required_text(body, "input_prefix"), suffix=_required_text(body, "input_suffix"),
                         prompt=read_str(body, "prompt", ""), extra=read_extra(body.get("input_extra")),
                         suffix_first=read_bool(body, "spm_infill"))
    n_predict = read_int(body, "n_predict", low=-1)
    if n_predict is None:
        n_predict = read_int(body, "max_tokens", low=-1, default=-1)
    n_indent = read_int(body, "n_indent", low=0, default=0)
    t_max_predict_ms = read_int(body, "t_max_predict_ms", low=None, default=-1)
    read_int(body, "t_max_prompt_ms", low=None)
    read_bool(body, "cache_prompt", True)
    read_samplers(body.get("samplers"))
    response_fields = read_response_fields(body.get("response_fields"))
    sampling = read_sampling(body, chat_model.engine.n_vocab)
    check_grammar(chat_model.engine, sampling)
    user_stops = read_stop(body)
    tokens = fim_prompt(chat_model.engine, model_id, fim_input, "input_prefix")
    check_fits(chat_model.engine, tokens)
    request = GenerationRequest(
        prompt_tokens=tokens, sampling=sampling, max_tokens=None if n_predict < 0 else n_predict,
        stop=user_stops, label=f"infill {request_id}",
        line_time_limit=t_max_predict_ms / 1000 if t_max_predict_ms > 0 else None, min_indent=n_indent)
    fills_the_middle(chat_model.engine, request)
    settings = {"n_predict": n_predict, "n_indent": n_indent, "t_max_predict_ms": t_max_predict_ms,
                "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                "min_p": sampling.min_p, "seed": sampling.seed, "stop": user_stops}
    return InfillPlan(request, settings, user_stops, response_fields)


def _required_text(body: dict, name: str) -> str:
    if name not in body:
        raise invalid(name, "is required (a string; may be empty)")
    return read_str(body, name, "")


def read_extra(value: Any) -> list[ExtraFile]:
    """input_extra: [{"text": string, "filename": string (optional)}] (other fields, as llama.vim's
    "time", are ignored)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid("input_extra", f'expected an array of {{"filename": string, "text": string}}, '
                                     f'got {kind_of(value)}')
    if len(value) > MAX_EXTRA_CHUNKS:
        raise invalid("input_extra", f"at most {MAX_EXTRA_CHUNKS} chunks are taken (MAX_EXTRA_CHUNKS), "
                                     f"this has {len(value)}")
    files = []
    for i, chunk in enumerate(value):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise invalid(f"input_extra[{i}]", 'expected an object with a "text" string')
        filename = chunk.get("filename", "tmp")
        if not isinstance(filename, str):
            raise invalid(f"input_extra[{i}].filename", f"expected a string, got {kind_of(filename)}")
        if len(filename) > MAX_EXTRA_FILENAME_CHARS:
            raise invalid(f"input_extra[{i}].filename", f"at most {MAX_EXTRA_FILENAME_CHARS} characters are taken "
                                                        f"(MAX_EXTRA_FILENAME_CHARS), this has {len(filename)}")
        files.append(ExtraFile(filename, chunk["text"]))
    return files


def read_samplers(value: Any) -> None:
    """llama-server's sampler order, a list of names or a string of letters: accepted, not used."""
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise invalid("samplers", f"expected an array of sampler names or a string, got {kind_of(value)}")


def read_response_fields(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(path, str) for path in value):
        raise invalid("response_fields", f"expected an array of field paths, got {kind_of(value)}")
    return value


def pick_fields(body: dict, paths: list[str]) -> dict:
    """llama-server's response_fields: each path ("timings/prompt_n") that names a value, keyed by
    the path itself."""
    picked = {}
    for path in paths:
        value: Any = body
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            picked[path] = value
    return picked


class InfillFinal:
    """The completion object llama-server answers with (non-OAI), from a finished job."""

    def __init__(self, plan: InfillPlan, model_id: str, chat_model: ChatModel):
        self.plan = plan
        self.model_id = model_id
        self.n_ctx = chat_model.engine.n_ctx
        self.prompt_text = lambda: chat_model.engine.detokenize(plan.request.prompt_tokens)

    def _wants(self, field: str) -> bool:
        """Whether the answer shows this field (the prompt's text costs a detokenize per keystroke)."""
        fields = self.plan.response_fields
        return fields is None or any(path.split("/")[0] == field for path in fields)

    def stop_type(self, output: GenerationOutput) -> str:
        if output.finish_reason == "length":
            return "limit"
        if output.finish_reason == "cancelled":
            return "none"
        return "word" if output.stop_sequence in self.plan.user_stops else "eos"

    def body(self, output: GenerationOutput, streamed: bool = False) -> dict:
        """The whole answer, response_fields picked; a stream's last line carries no content
        (its pieces went before)."""
        full = self.whole(output, streamed)
        fields = self.plan.response_fields
        return pick_fields(full, fields) if fields is not None else full

    def whole(self, output: GenerationOutput, streamed: bool) -> dict:
        stop_type = self.stop_type(output)
        held = output.prompt_tokens + output.completion_tokens
        return {
            "index": 0, "content": "" if streamed else output.content, "tokens": [], "id_slot": -1, "stop": True,
            "model": self.model_id, "tokens_predicted": output.completion_tokens,
            "tokens_evaluated": output.prompt_tokens, "generation_settings": self.plan.settings,
            "prompt": self.prompt_text() if self._wants("prompt") else "", "has_new_line": "\n" in output.content,
            "truncated": stop_type == "limit" and held + 1 >= self.n_ctx, "stop_type": stop_type,
            "stopping_word": output.stop_sequence if stop_type == "word" else "",
            "tokens_cached": held, "timings": infill_timings(output),
        }


def infill_timings(output: GenerationOutput) -> dict:
    t = output.timings
    evaluated = output.prompt_tokens - output.cached_tokens
    predicted = output.completion_tokens
    return {
        "cache_n": output.cached_tokens,
        "prompt_n": evaluated,
        "prompt_ms": round(t.prefill_ms, 3),
        "prompt_per_token_ms": round(t.prefill_ms / evaluated, 3) if evaluated else 0.0,
        "prompt_per_second": round(evaluated / (t.prefill_ms / 1000), 3) if t.prefill_ms > 0 else 0.0,
        "predicted_n": predicted,
        "predicted_ms": round(t.decode_ms, 3),
        "predicted_per_token_ms": round(t.decode_ms / predicted, 3) if predicted else 0.0,
        "predicted_per_second": round(predicted / (t.decode_ms / 1000), 3) if t.decode_ms > 0 else 0.0,
        "draft_n": t.draft_n,                   # speculative decoding, named as llama-server names them
        "draft_n_accepted": t.draft_n_accepted,
    }


class InfillChunks(StreamShape):
    """Runtime events → llama-server's /infill stream: content pieces, then the whole object
    (/completion's stream is the same, with its own pieces and error body)."""
    done = False
    error_body = staticmethod(openai_error_body)

    def __init__(self, final: InfillFinal):
        self.final = final
        self.evaluated = len(final.plan.request.prompt_tokens)

    def piece(self, chunk: Chunk) -> dict:
        return {"index": 0, "content": chunk.text, "tokens": [], "stop": False, "id_slot": -1,
                "tokens_evaluated": self.evaluated}

    def feed(self, event: object) -> list[bytes]:
        if isinstance(event, Chunk) and event.text and not event.reasoning:
            return [sse(self.piece(event))]
        if isinstance(event, Finished):
            return [sse(self.final.body(event.output, streamed=True))]
        return []

    def fail(self, error: ApiError) -> list[bytes]:
        return [sse(self.error_body(error))]

    def keepalive(self) -> list[bytes]:
        return [PREFILL_COMMENT]

    def end(self) -> list[bytes]:
        return []
