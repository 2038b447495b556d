"""llama-server's POST /completion (and /completions): a raw prompt continued, in its own shape.

The prompt is a string, token ids, both mixed (`[12, "text", 34]`: a string first gets the BOS),
or `{prompt_string, multimodal_data}` with images. An array holding no number is several prompts
(`["a", "b"]`, `[[1, 2], [3]]`), each its own job, answered as an array of completion objects
(each with its `index`), or one stream whose lines carry their prompt's `index`
(several_prompts.py); so are a prompt's n_cmpl choices (`n` its alias), each a job whose seed is
the request's + its number, their prompt computed once (dialects/choices.py). Fields read:
n_predict (max_tokens), the sampling fields every dialect shares, typical_p, ignore_eos (the end
tokens banned), stop, grammar or json_schema, n_probs and post_sampling_probs, n_indent and
t_max_predict_ms (as /infill), return_tokens, response_fields, stream, id_slot (the job runs in
that slot, waiting while it is busy; -1: the slot that holds the longest prefix of its prompt).
cache_prompt, samplers, n_keep and the samplers this engine does not have (mirostat, dry_*,
xtc_*, dynatemp_*) are accepted and change nothing: the prompt cache is always on. The answer is
the completion object /infill answers with (`content`, `stop`, `stop_type`, `stopping_word`,
`tokens_predicted`, `timings`, `generation_settings`..., `id_slot` the slot it ran in); a stream
is `data:` lines of content, the last the whole object with `"stop": true`, and no [DONE].
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from .. import stored_defaults
from ...errors import ApiError
from ...generation import Chunk, GenerationOutput, GenerationRequest, SamplingParams
from ...grammar.grammar import SchemaError, json_schema_grammar
from ...prompt.build import MALFORMED_SCHEMA, ChatModel, check_fits, check_grammar, schema_problem, tokenize_to_fit
from ..choices import check_room, choice_requests
from ..exchange import Exchange, RouteTable
from ..failures import prompt_refusals
from ..fields import invalid, kind_of, read_bool, read_int, read_number, read_sampling, read_stop
from ..fim import fills_the_middle, writes_its_own_fim
from ..limits import MAX_CHOICES
from ..infill import InfillChunks, InfillFinal, InfillPlan, read_response_fields, read_samplers
from ..openai.completion_images import is_object_prompt, read_object_prompt
from ..request_cycle import Reply, serve_generation
from ..services import Services
from .errors import LLAMA_ERRORS, llama_error_body
from .several_prompts import serve_several

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel

MAX_N_PROBS = 20         # alternatives per token (n_probs), as OpenAI's top_logprobs
MAX_PROMPTS = 64         # prompts in one request (each is a job in the model's queue)


def add_routes(table: RouteTable, services: Services) -> None:
    for path in ("/completion", "/completions"):
        table.add(path, "POST", partial(handle, services), errors=LLAMA_ERRORS)


def handle(services: Services, exchange: Exchange) -> None:
    prompts = split_prompts(exchange.json(), min(MAX_PROMPTS, services.settings.max_queue))
    choices = read_n_cmpl(exchange.json())
    if len(prompts) > 1 or choices > 1:
        serve_several(services, exchange, prompts, partial(read_choices_of, choices=choices), CompletionChunks)
        return

    def reply(model: ServedModel, body: dict) -> Reply:
        with prompt_refusals("prompt"):
            plan = read_request(model.chat, body, prompts[0], exchange.request_id, model.settings.slots)
        final = CompletionFinal(plan, model.model_id, model.chat)
        return Reply(plan.request, shape=lambda gen: CompletionChunks(final), whole=final.body)

    serve_generation(exchange, services, reply, stored=stored_defaults.LLAMA_COMPLETION)


def read_choices_of(model: ServedModel, body: dict, prompt: Any, index: int, label: str,
                    choices: int = 1) -> list[CompletionFinal]:
    """One of the request's prompts' completion object makers (several_prompts.py), one per
    choice (n_cmpl): their indices follow the prompt's, as llama-server numbers them."""
    check_room(choices, model, choice_param(body))
    plan = read_request(model.chat, body, prompt, label, model.settings.slots)
    if choices == 1:
        return [CompletionFinal(plan, model.model_id, model.chat, index)]
    return [CompletionFinal(dataclasses.replace(plan, request=request), model.model_id, model.chat,
                            index * choices + i)
            for i, request in enumerate(choice_requests(plan.request, choices))]


def read_n_cmpl(body: dict) -> int:
    """llama-server's n_cmpl (`n` its alias, as in OpenAI's Completions): choices per prompt,
    1 to MAX_CHOICES."""
    return read_int(body, choice_param(body), low=1, high=MAX_CHOICES, default=1)


def choice_param(body: dict) -> str:
    return "n_cmpl" if body.get("n_cmpl") is not None else "n"


def split_prompts(body: dict, limit: int = MAX_PROMPTS) -> list:
    """The request's prompts: as llama-server reads `prompt`, an array holding no number is
    several (each a string, token ids, mixed, or an object); anything else is one. At most
    `limit`: more than the model's queue holds (--max-queue) would be a 503 on every try."""
    if "prompt" not in body:
        raise invalid("prompt", "is required: a string, token ids, or both mixed")
    prompt = body["prompt"]
    if isinstance(prompt, list) and not any(type(part) is int for part in prompt):
        if not prompt:
            raise invalid("prompt", "is empty; give at least one character or token to continue from")
        if len(prompt) > limit:
            raise invalid("prompt", f"holds {len(prompt)} prompts; at most {limit} go in one request "
                                    f"(each is a job in the model's queue)")
        return prompt
    return [prompt]


@dataclass
class CompletionPlan(InfillPlan):
    """/infill's plan, and what /completion adds to its answer."""
    return_tokens: bool = False
    post_sampling_probs: bool = False


def read_request(chat_model: ChatModel, body: dict, prompt: Any, request_id: str, slots: int = 1) -> CompletionPlan:
    """One prompt's job (of split_prompts' prompts) with the request's other fields; `slots`: how
    many the model has (an id_slot past the last wraps, as llama-server's)."""
    engine = chat_model.engine
    tokens, images = read_prompt(chat_model, prompt)
    check_fits(engine, tokens)
    n_predict = read_int(body, "n_predict", low=-1)
    if n_predict is None:
        n_predict = read_int(body, "max_tokens", low=-1, default=-1)
    n_indent = read_int(body, "n_indent", low=0, default=0)
    t_max_predict_ms = read_int(body, "t_max_predict_ms", low=None, default=0)
    n_probs = read_int(body, "n_probs", low=0, high=MAX_N_PROBS, default=0)
    slot_id = read_int(body, "id_slot", low=-1, default=-1)
    read_bool(body, "cache_prompt", True)
    read_samplers(body.get("samplers"))
    temperature = body.get("temperature")
    if type(temperature) in (int, float) and temperature < 0:      # llama-server: below 0 is greedy, as 0 is
        body = {**body, "temperature": 0}
    sampling = read_sampling(body, engine.n_vocab, temperature_high=math.inf)
    sampling.typical_p = read_number(body, "typical_p", low=0, high=1, default=1.0)
    read_json_schema(body, sampling)
    check_grammar(engine, sampling, "json_schema" if body.get("json_schema") is not None else "grammar")
    if read_bool(body, "ignore_eos"):        # the end tokens banned: the answer runs to n_predict
        sampling.logit_bias.update({token: -100.0 for token in engine.eog_tokens})
    user_stops = read_stop(body)
    request = GenerationRequest(
        prompt_tokens=tokens, sampling=sampling, max_tokens=None if n_predict < 0 else n_predict,
        stop=user_stops, logprobs=n_probs > 0, top_logprobs=n_probs, label=f"completion {request_id}",
        line_time_limit=t_max_predict_ms / 1000 if t_max_predict_ms > 0 else None, min_indent=n_indent,
        images=images, slot_id=None if slot_id < 0 else slot_id % slots)
    if writes_its_own_fim(engine, tokens):      # a client that laid out the model's FIM prompt itself
        fills_the_middle(engine, request)
    settings = generation_settings(sampling, n_predict, user_stops, engine.n_ctx, n_probs, read_bool(body, "stream"))
    return CompletionPlan(request, settings, user_stops, read_response_fields(body.get("response_fields")),
                          return_tokens=read_bool(body, "return_tokens"),
                          post_sampling_probs=read_bool(body, "post_sampling_probs"))


def read_prompt(chat_model: ChatModel, prompt: Any) -> tuple[list[int], list]:
    """One prompt's tokens, and its image chunks (an object prompt's)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list, dict)):
        prompt = prompt[0]      # a batch of one
    if is_object_prompt(prompt):
        multimodal = read_object_prompt(chat_model, prompt, lambda text: mixed_tokens(chat_model, [text]))
        return multimodal.tokens, multimodal.images
    if isinstance(prompt, str):
        return mixed_tokens(chat_model, [prompt]), []
    if isinstance(prompt, list) and all(isinstance(part, (str, int)) and not isinstance(part, bool)
                                        for part in prompt):
        return mixed_tokens(chat_model, prompt), []
    raise invalid("prompt", f"expected a string, token ids, both mixed, or an object with prompt_string; "
                            f"got {kind_of(prompt)}")


def mixed_tokens(chat_model: ChatModel, parts: list[str | int]) -> list[int]:
    """llama-server's mixed prompt: each string tokenized (special tokens read as such; a string
    that comes first gets the BOS), each number a token id."""
    engine = chat_model.engine
    tokens: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            tokens += tokenize_to_fit(engine, part, add_special=i == 0, parse_special=True)
        elif engine.valid_token(part):
            tokens.append(part)
        else:
            raise invalid("prompt", f"token id {part} is outside the vocabulary")
        if len(tokens) >= engine.n_ctx:
            break               # check_fits names the sizes
    if not tokens:              # this model adds no BOS: there is nothing to continue from
        raise invalid("prompt", "is empty; give at least one character or token to continue from")
    return tokens


def read_json_schema(body: dict, sampling: SamplingParams) -> None:
    """json_schema: the answer held to it by a grammar; a grammar as well is llama-server's 400."""
    schema = body.get("json_schema")
    if schema is None:
        return
    if not isinstance(schema, dict):
        raise invalid("json_schema", f"expected a JSON schema object, got {kind_of(schema)}")
    if sampling.grammar:
        raise invalid("json_schema", "give either json_schema or grammar, not both")
    try:
        sampling.grammar = json_schema_grammar(schema)
    except (SchemaError, *MALFORMED_SCHEMA) as exc:
        raise ApiError(400, f"invalid 'json_schema': {schema_problem(exc)}", param="json_schema",
                       code="invalid_schema") from None


def generation_settings(sampling: SamplingParams, n_predict: int, stops: list[str], n_ctx: int,
                        n_probs: int = 0, stream: bool = False) -> dict:
    """What llama-server reports as a request's generation_settings (and /props as the defaults)."""
    return {
        "n_ctx": n_ctx, "n_predict": n_predict, "max_tokens": n_predict, "seed": sampling.seed,
        "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
        "min_p": sampling.min_p, "typical_p": sampling.typical_p, "repeat_last_n": sampling.repeat_last_n,
        "repeat_penalty": sampling.repeat_penalty, "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty, "stop": stops, "stream": stream, "n_probs": n_probs,
        "grammar": sampling.grammar or "",
        "samplers": ["penalties", "top_k", "typ_p", "top_p", "min_p", "temperature"],
    }


def probabilities(entries: list[dict], post_sampling: bool) -> list[dict]:
    """llama-server's completion_probabilities: each token (its id, text and bytes) with its
    alternatives, as log probabilities (or, post_sampling_probs, as probabilities: of the
    model's distribution, before the sampler's cuts, which this engine does not record)."""
    def one(entry: dict) -> dict:
        if post_sampling:
            return {"id": entry["id"], "token": entry["token"], "bytes": entry["bytes"],
                    "prob": math.exp(entry["logprob"])}
        return {"id": entry["id"], "token": entry["token"], "bytes": entry["bytes"], "logprob": entry["logprob"]}

    key = "top_probs" if post_sampling else "top_logprobs"
    return [{**one(entry), key: [one(alt) for alt in entry["top_logprobs"]]} for entry in entries]


class CompletionFinal(InfillFinal):
    """The completion object: /infill's, with the tokens and their probabilities when asked, the
    slot it ran in, and its prompt's index among the request's prompts."""
    plan: CompletionPlan

    def __init__(self, plan: CompletionPlan, model_id: str, model: ChatModel, index: int = 0):
        super().__init__(plan, model_id, model)
        self.index = index

    def whole(self, output: GenerationOutput, streamed: bool) -> dict:
        answer = super().whole(output, streamed)
        answer["index"], answer["id_slot"] = self.index, output.slot_id
        if self.plan.return_tokens and not streamed:
            answer["tokens"] = output.token_ids
        if output.logprobs and not streamed:
            answer["completion_probabilities"] = probabilities(output.logprobs, self.plan.post_sampling_probs)
        return answer


class CompletionChunks(InfillChunks):
    """Runtime events → /completion's stream: /infill's, each piece with its probabilities when asked."""
    final: CompletionFinal
    error_body = staticmethod(llama_error_body)

    def __init__(self, final: CompletionFinal):
        super().__init__(final)
        slot_id = final.plan.request.slot_id
        self.slot = -1 if slot_id is None else slot_id      # unpinned, the slot it ran in is known at its end

    def piece(self, chunk: Chunk) -> dict:
        piece = super().piece(chunk)
        piece["index"], piece["id_slot"] = self.final.index, self.slot
        if chunk.logprobs:
            piece["completion_probabilities"] = probabilities(chunk.logprobs, self.final.plan.post_sampling_probs)
        return piece
