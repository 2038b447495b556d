"""From a conversation, its tools and output constraints to a GenerationRequest.

Every chat-shaped dialect (Chat Completions, Anthropic Messages, Responses) reads its
input into the typed conversation (localserve/conversation.py: messages and tool
definitions), then calls build_chat_request. Here the images and clips are fitted to the
model (media_checks.py: how many, and what a model without vision or an audio encoder makes of
them), the template is rendered, the prompt tokenized and checked against the context, the
reasoning format found, and tool_choice or a response format turned into a grammar. A dialect
that only shows the prompt renders it with render_prompt, which fits the media the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..conversation import Message, ToolDefinition, media_in
from ..engine.facade import EngineFacade, GrammarError, TooManyTokens
from ..errors import InputRefused
from ..generation import MEDIA_MARKER, ContextOverflow, GenerationRequest, PromptRefused, SamplingParams, ToolSpec
from ..grammar.grammar import GrammarBuilder, SchemaError, tool_call_grammar
from ..grammar.limits import GrammarTooCostly, check_size
from ..media_checks import AUDIO, IMAGE, fit_media
from ..parsing.content_markup import detect_content_markup
from ..parsing.reasoning import ReasoningFormat, detect_reasoning, prompt_opens_reasoning
from ..parsing.call_format import CallFormat
from ..parsing.tool_families import TOOL_SYNTAXES, ToolSyntax
from ..parsing.tools import marker_prompt_opened
from .media import tokenize_with_images
from .messages import template_messages, template_tools
from .room import MAX_TOKENIZE_BYTES, RenderLimit
from .templates import (ChatTemplate, OutputTooLong, TemplateError, fold_system_turns, has_later_system_turns,
                        has_user_runs, normalize_messages, shows_every_system_turn)


@dataclass(frozen=True)
class ChatModel:
    """The loaded model as building a prompt sees it (fixed once loaded)."""
    engine: EngineFacade
    template: ChatTemplate
    tool_syntax: str = "json"                          # the family's name (the model's meta)
    tool_family: ToolSyntax | None = None              # the family itself, when derived from the template
    default_reasoning: ReasoningFormat | None = None   # <think> splitting the vocabulary implies
    name: str = ""                                     # the model's name, as refusals name it
    vision: bool = False                               # it has a vision projector: it reads images
    audio: bool = False                                # its projector has an audio encoder: it hears clips

    def fit_limit(self) -> RenderLimit:
        """How far a prompt that must fit this model's context is rendered (prompt/room.py)."""
        return RenderLimit.to_fit(self.engine.n_ctx, self.engine.max_piece_bytes)


@dataclass
class ToolChoice:
    mode: str = "auto"             # none | auto | required | named
    name: str | None = None


@dataclass
class ChatInput:
    messages: list[Message]
    tools: list[ToolDefinition] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    response_schema: dict | None = None                  # json_schema output
    json_object: bool = False
    template_kwargs: dict = field(default_factory=dict)
    reasoning_budget: int | None = None
    add_generation_prompt: bool = True                   # False: a history only (/apply-template)
    images_omitted: int = 0                              # images shown as text: the model has no vision (media_checks.py)
    audio_omitted: int = 0                               # clips shown as text: the model has no audio encoder

    @property
    def strict_tools(self) -> frozenset[str]:
        """The names of the tools marked strict."""
        return frozenset(t.name for t in self.tools if t.strict)


def fit_images(model: ChatModel, chat: ChatInput) -> bool:
    """chat.messages as `model` can take their images and clips (media_checks.fit_media),
    chat.images_omitted and chat.audio_omitted counting the parts that became text; PromptRefused naming a part past a
    limit, or one of a kind the model cannot take that it is asked about. True when it changed
    the messages; again on the same chat, a no-op."""
    takes = [kind for kind, has in ((IMAGE, model.vision), (AUDIO, model.audio)) if has]
    try:
        messages, omitted = fit_media(chat.messages, takes=takes, model_name=model.name)
    except InputRefused as exc:
        raise PromptRefused(f"invalid '{exc.param}': {exc}", code=exc.code, param=exc.param) from None
    if not omitted:
        return False
    chat.messages = messages
    chat.images_omitted += omitted.get(IMAGE.noun, 0)
    chat.audio_omitted += omitted.get(AUDIO.noun, 0)
    return True


def render_prompt(model: ChatModel, chat: ChatInput, limit: RenderLimit) -> str:
    """The prompt text `model` would run for `chat`: its images fitted first (fit_images)."""
    fit_images(model, chat)
    return render_chat(model.template, chat, limit)


def render_chat(template: ChatTemplate, chat: ChatInput, limit: RenderLimit | None = None) -> str:
    """The prompt text. System turns after the first message are kept where the template
    shows them; a template that refuses them, or leaves one out, gets them merged into the
    user turns around them instead (so the prefix before them, and its cache, stays). User turns
    in a row that a template refuses are joined into one the same way.
    `limit`: the prompt is refused as soon as it surely passes it (prompt/room.py)."""
    tools = template_tools(chat.tools) if chat.tools and chat.tool_choice.mode != "none" else None
    if limit is not None:
        limit.check_turns(message.role for message in chat.messages)

    def render(messages: list[dict]) -> str:
        return template.render(normalize_messages(messages), tools=tools,
                               add_generation_prompt=chat.add_generation_prompt, extra=chat.template_kwargs,
                               max_chars=None if limit is None else limit.max_chars)

    try:
        messages = template_messages(chat.messages)
        try:
            text = render(messages)
        except TemplateError:
            # Mistral's templates insist that turns alternate; Codex sends two user turns in a row
            if not has_later_system_turns(messages) and not has_user_runs(messages):
                raise
        else:
            if not has_later_system_turns(messages) or shows_every_system_turn(messages, render):
                return text
        return render(fold_system_turns(messages))
    except OutputTooLong as exc:
        assert limit is not None
        raise limit.refusal(exc.chars) from None
    except TemplateError as exc:
        raise PromptRefused(f"the chat template failed: {exc}", code="template_error", param="messages") from None


def tokenize_prompt(engine: EngineFacade, text: str, *, fit: bool = False, param: str = "messages") -> list[int]:
    """The prompt's tokens (the template writes the BOS text when the model wants one; the engine
    adds it only once). fit: it must fit the context, and a text far too long for it is refused
    without being tokenized; otherwise (counting) the text has a size cap."""
    if fit:
        return tokenize_to_fit(engine, text, add_special=True, parse_special=True)
    return tokenize_capped(engine, text, param, add_special=True, parse_special=True)


def tokenize_shown(engine: EngineFacade, text: str, messages: list[Message], *, fit: bool = False) -> list[int]:
    """The tokens of a rendered chat, or of its start, counted as the runtime would run them: each
    media marker in it as its image's positions (the messages' images, in order)."""
    images = media_in(messages)[:text.count(MEDIA_MARKER)]
    if not images:
        return tokenize_prompt(engine, text, fit=fit)
    return tokenize_with_images(engine, text, images, fit=fit, text_after=False)[0]


def tokenize_to_fit(engine: EngineFacade, text: str, **options: bool) -> list[int]:
    """Tokens of a prompt that must fit the context: ContextOverflow otherwise."""
    try:
        return engine.tokenize(text, limit=engine.n_ctx, **options)
    except TooManyTokens as exc:
        raise ContextOverflow(exc.at_least, engine.n_ctx, at_least=True) from None


def tokenize_capped(engine: EngineFacade, text: str, param: str, **options: bool) -> list[int]:
    """Tokens of a text only counted or shown, up to MAX_TOKENIZE_BYTES of it (PromptRefused beyond)."""
    size = len(text) if len(text) > MAX_TOKENIZE_BYTES else len(text.encode("utf-8"))
    if size > MAX_TOKENIZE_BYTES:
        raise PromptRefused(f"invalid '{param}': at most {MAX_TOKENIZE_BYTES} bytes of text are tokenized at "
                            f"once, this is {size}", param=param, code="text_too_long")
    return engine.tokenize(text, **options)


def check_fits(engine: EngineFacade, tokens: list[int]) -> None:
    n_ctx = engine.n_ctx
    if len(tokens) >= n_ctx:
        raise ContextOverflow(len(tokens), n_ctx)


def build_chat_request(model: ChatModel, chat: ChatInput, sampling: SamplingParams, *, max_tokens: int | None,
                       stop: list[str], logprobs: bool = False, top_logprobs: int = 0,
                       label: str = "", text: str | None = None,
                       cut: Callable[[list[int]], list[int]] | None = None) -> GenerationRequest:
    """`text`: the chat already rendered by the caller (render_prompt), to render it once. `cut`:
    makes the tokens of a prompt longer than the context fit it (Ollama's truncate; a prompt
    with images is never cut); without it such a prompt is ContextOverflow, refused as soon as
    its render shows it (prompt/room.py)."""
    if fit_images(model, chat) or text is None:     # a text rendered before its images were fitted is stale
        text = render_chat(model.template, chat, RenderLimit.to_count() if cut is not None else model.fit_limit())
    images = media_in(chat.messages)
    if images:
        tokens, chunks = tokenize_with_images(model.engine, text, images)
    elif cut is not None:
        tokens, chunks = tokenize_prompt(model.engine, text), []
        if len(tokens) >= model.engine.n_ctx:
            tokens = cut(tokens)
    else:
        tokens, chunks = tokenize_prompt(model.engine, text, fit=True), []
    check_fits(model.engine, tokens)
    request = GenerationRequest(prompt_tokens=tokens, sampling=sampling, max_tokens=max_tokens, stop=stop,
                                logprobs=logprobs, top_logprobs=top_logprobs, label=label, images=chunks,
                                images_omitted=chat.images_omitted, audio_omitted=chat.audio_omitted)
    fmt = detect_reasoning(model.template.text, text) or model.default_reasoning
    # A grammar forced on a prompt that opened the reasoning block first closes it:
    # otherwise the whole constrained answer would land inside the reasoning.
    grammar_prefix = ""
    if fmt is not None:
        request.reasoning = fmt
        request.reasoning_starts_inside = prompt_opens_reasoning(fmt, text)
        request.reasoning_budget = chat.reasoning_budget
        if request.reasoning_starts_inside:
            grammar_prefix = fmt.close.lstrip("\n") if fmt.close.startswith("\n") else fmt.close
    request.content_markup = detect_content_markup(model.template.text)
    use_tools = bool(chat.tools) and chat.tool_choice.mode != "none"
    if use_tools:
        syntax = model.tool_family or TOOL_SYNTAXES[model.tool_syntax]
        # names with their parameter schemas: qwen3_coder's parser reads values by type
        opened = marker_prompt_opened(syntax, text)
        request.tools = ToolSpec(syntax, {t.name: t.parameters for t in chat.tools},
                                 parallel=chat.parallel_tool_calls, starts_inside=bool(opened))
        if chat.tool_choice.mode in ("required", "named") and not sampling.grammar:
            sampling.grammar = forced_tool_grammar(syntax, chat, grammar_prefix, opened)
    if not sampling.grammar:
        sampling.grammar = output_grammar(chat, grammar_prefix)
    check_grammar(model.engine, sampling)
    if use_tools and chat.tool_choice.mode == "auto" and chat.strict_tools and not sampling.grammar:
        sampling.call_grammar = strict_call_grammar(syntax, chat)
        check_grammar_text(model.engine, sampling.call_grammar, "tools")
    return request


def check_grammar(engine: EngineFacade, sampling: SamplingParams, param: str = "grammar") -> None:
    """A grammar llama.cpp cannot run is the client's error (PromptRefused), before the job is queued."""
    if sampling.grammar:
        sampling.grammar_tokens = check_grammar_text(engine, sampling.grammar, param)


def check_grammar_text(engine: EngineFacade, grammar: str, param: str) -> frozenset[int]:
    """The tokens the grammar names whole; PromptRefused when llama.cpp cannot (or must not) run it."""
    try:
        check_size(grammar)
        return engine.check_grammar(grammar)
    except GrammarTooCostly as exc:
        raise PromptRefused(str(exc), param=param, code="grammar_too_costly") from None
    except GrammarError as exc:
        raise PromptRefused(str(exc), param=param, code="invalid_grammar") from None


def forced_tool_grammar(syntax: ToolSyntax, chat: ChatInput, prefix: str = "", opened: str = "") -> str:
    tools = grammar_tools(chat.tools)
    if chat.tool_choice.mode == "named":
        tools = [t for t in tools if t["name"] == chat.tool_choice.name]
    # A named tool_choice means exactly one call of that function.
    parallel = chat.parallel_tool_calls and chat.tool_choice.mode != "named"
    return _calls_grammar(syntax, tools, parallel=parallel, forced_name=chat.tool_choice.name, prefix=prefix,
                          opened=opened)


def strict_call_grammar(syntax: str | ToolSyntax, chat: ChatInput) -> str:
    """What a call the model opens on its own is held to (runtime/call_wake.py): a strict tool's
    arguments match its schema, another tool's are any JSON object. A family that writes one
    block per parameter (qwen3_coder, a derived format of key/value pairs) cannot write "any
    object": there every tool keeps its schema. The markup's whitespace is any the family's parser
    reads, so that the model's own spacing up to the wake passes (``<tool_call>{"na``)."""
    shape = (TOOL_SYNTAXES[syntax] if isinstance(syntax, str) else syntax).grammar
    any_object = shape.layout != "pairs" if isinstance(shape, CallFormat) else not shape.parameters
    tools = [{**t, "parameters": {"type": "object"}} if any_object and t["name"] not in chat.strict_tools else t
             for t in grammar_tools(chat.tools)]
    return _calls_grammar(syntax, tools, parallel=chat.parallel_tool_calls, loose_markup=True)


def grammar_tools(tools: list[ToolDefinition]) -> list[dict]:
    """The definitions as the grammar builder reads them."""
    return [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]


def _calls_grammar(syntax: str, tools: list[dict], **options) -> str:
    try:
        return tool_call_grammar(syntax, tools, **options)
    except (SchemaError, *MALFORMED_SCHEMA) as exc:
        raise PromptRefused(f"a tool's parameters schema is not usable: {schema_problem(exc)}", param="tools",
                            code="invalid_schema") from None


# What a schema with a keyword of the wrong type (``"required": 5`` inside ``allOf``,
# ``"enum": 5``) raises where the builder reads it without checking first.
MALFORMED_SCHEMA = (TypeError, AttributeError)


def schema_problem(exc: Exception) -> str:
    return str(exc) if isinstance(exc, SchemaError) else f"a keyword has a value of the wrong type ({exc})"


def output_grammar(chat: ChatInput, prefix: str = "") -> str | None:
    """The grammar for response_format json_schema / json_object, after an optional literal prefix."""
    builder = GrammarBuilder()
    if chat.response_schema is not None:
        try:
            rule = builder.add_schema(chat.response_schema)
        except (SchemaError, *MALFORMED_SCHEMA) as exc:
            raise PromptRefused(f"invalid JSON schema: {schema_problem(exc)}", param="response_format",
                                code="invalid_schema") from None
    elif chat.json_object:
        rule = "object"
    else:
        return None
    return builder.build(f"{builder.literal(prefix)} {rule}" if prefix else rule)
