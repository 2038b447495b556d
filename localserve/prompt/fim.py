"""Fill-in-the-middle prompts: the text around a cursor → the model's FIM token sequence.

Every completion route that fills a hole (llama-server's /infill, OpenAI Completions with
`suffix`, Ollama's /api/generate with `suffix`) builds its prompt here, in one layout:

    [BOS] extra context  [PRE] prefix prompt  [SUF] suffix  [MID]         (prefix first, PSM)
    [BOS] extra context  [SUF] suffix  [PRE] prefix prompt  [MID]         (suffix first, SPM)

The extra context (other files, as editors send them) comes first, before anything near the
cursor: it changes least between keystrokes, so the prompt cache keeps its KV and a keystroke
re-processes only the text around the cursor. With the model's repository tokens it is laid
out as the model was trained on it (Qwen2.5-Coder's repo-level format):

    [REP] project\\n  [SEP] file0\\n text0  [SEP] file1\\n text1 ...  [SEP] current file\\n

and without them each chunk is preceded by a plain-text snippet separator. `prompt` is text
that continues the prefix and is never trimmed (llama.vim sends the cursor line's start in
it, so the prefix stays the same, and cached, while one line is typed).

What is kept when the context is small follows llama-server. The answer's room
(FIM_ANSWER_RESERVE, the same for every request, so that a warm-up and the completion after it
build the same prompt) is set aside. Without extra context the text around the cursor may use the
rest; with it, the cursor's window is at most FIM_WINDOW_TOKENS and half the rest, and the extra
context keeps the end of what it is given in the room the window leaves, whatever the window
holds. In the window the prompt is kept whole, the prefix keeps its end in all but the suffix's
share (a quarter at most, less for a shorter suffix), and the suffix its start in what the prefix
and the prompt leave. User text is tokenized without special tokens: a "<|fim_prefix|>" typed in a file
stays text. llama-server places BOS after the extra context; here it leads the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.facade import EngineFacade, FimTokens, TooManyTokens
from ..errors import context_exceeded

# The most tokens kept around the cursor (prefix, prompt and suffix): llama-server's default
# n_batch, which is what it keeps there.
FIM_WINDOW_TOKENS = 2048
# Room left in the context for the answer when the request names no length.
FIM_ANSWER_RESERVE = 256
# The repository layout's names where the request gives none (llama-server's placeholders).
DEFAULT_PROJECT = "myproject"
DEFAULT_FILENAME = "filename"
# Between extra chunks when the model has no file separator token.
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"


class NoFimTokens(ValueError):
    """The model has no fill-in-the-middle tokens (missing: the roles it lacks)."""

    def __init__(self, missing: list[str]):
        names = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
        super().__init__("its vocabulary has no fill-in-the-middle token for: " + ", ".join(names[m] for m in missing))
        self.missing = missing


@dataclass
class ExtraFile:
    """A piece of repository context: a file's name and (part of) its text."""
    filename: str
    text: str


@dataclass
class FimInput:
    prefix: str
    suffix: str
    prompt: str = ""                        # continues the prefix, never trimmed
    extra: list[ExtraFile] = field(default_factory=list)
    project: str = DEFAULT_PROJECT
    filename: str = DEFAULT_FILENAME        # the file the cursor is in (repository layout)
    suffix_first: bool = False              # SPM order: the suffix before the prefix


def fim_tokens(engine: EngineFacade) -> FimTokens:
    """The model's FIM tokens; NoFimTokens when it lacks the prefix, suffix or middle one."""
    missing = engine.fim.missing()
    if missing:
        raise NoFimTokens(missing)
    return engine.fim


def build_fim_prompt(engine: EngineFacade, fim_input: FimInput, answer_tokens: int | None = None) -> list[int]:
    """The prompt tokens, trimmed to leave `answer_tokens` (FIM_ANSWER_RESERVE when None) of the
    context for the answer; NoFimTokens for a model without FIM tokens."""
    fim = fim_tokens(engine)

    def text(value: str) -> list[int]:
        return engine.tokenize(value, add_special=False, parse_special=False) if value else []

    # No more text is read than the context could hold: a token covers at most max_piece_bytes
    # characters, so the kept ends of a 30 MB prefix are found without tokenizing all of it.
    most = engine.n_ctx * max(1, engine.max_piece_bytes)
    try:
        prompt = engine.tokenize(fim_input.prompt, add_special=False, parse_special=False, limit=engine.n_ctx)
    except TooManyTokens as exc:
        raise context_exceeded(exc.at_least, engine.n_ctx, at_least=True) from None
    start = list(engine.prompt_start)
    reserve = FIM_ANSWER_RESERVE if answer_tokens is None else answer_tokens
    available = max(0, engine.n_ctx - reserve - len(start) - 3)     # less BOS and the three FIM tokens
    extra = _extra_context(fim, fim_input, text, most)
    # The extra context's share depends on the context alone, never on the text around the
    # cursor: then it is cut the same way on every keystroke, and stays cached.
    window = min(FIM_WINDOW_TOKENS, available // 2) if extra else available
    extra = extra[len(extra) - min(len(extra), available - window):]
    prefix, suffix = text(fim_input.prefix[-most:]), text(fim_input.suffix[:most])
    # The prefix's share does not depend on the prompt, which grows at every keystroke: the
    # prefix stays the same, and cached, while a line is typed; the suffix (after it) gives way.
    prefix = prefix[len(prefix) - min(len(prefix), window - min(len(suffix), window // 4)):]
    suffix = suffix[:max(0, window - len(prefix) - len(prompt))]
    before = [fim.pre, *prefix, *prompt]
    after = [fim.suf, *suffix]
    if fim_input.suffix_first:
        before, after = after, before
    return [*start, *extra, *before, *after, fim.mid]


def _extra_context(fim: FimTokens, fim_input: FimInput, text, most: int) -> list[int]:
    """The repository context; none without extra files (then no repository header either).
    Of the files' names and texts, only the last `most` characters are read."""
    tokens: list[int] = []
    if not fim_input.extra:
        return tokens
    if fim.rep is not None:
        tokens += [fim.rep, *text(fim_input.project + "\n")]
    for chunk in _last_characters(fim_input.extra, most):
        if fim.sep is not None:
            tokens += [fim.sep, *text(chunk.filename + "\n")]
        else:
            tokens += text(SNIPPET_SEPARATOR)
        tokens += text(chunk.text)
    if fim.sep is not None:
        tokens += [fim.sep, *text(fim_input.filename + "\n")]
    return tokens


def _last_characters(files: list[ExtraFile], most: int) -> list[ExtraFile]:
    """The files, newest last, while their names and texts add up to `most` characters (the
    oldest one kept may lose the start of its text): a name is tokenized too."""
    kept: list[ExtraFile] = []
    for chunk in reversed(files):
        room = most - len(chunk.filename)
        if room <= 0:
            break
        kept.append(chunk if len(chunk.text) <= room else ExtraFile(chunk.filename, chunk.text[-room:]))
        most = room - len(chunk.text)
    return kept[::-1]


def fim_stop_strings(engine: EngineFacade) -> list[str]:
    """A middle ends where the model starts another FIM section (its prefix, suffix or middle
    token): what follows would restate the text around the hole. (Pad, repo and file
    separator are end-of-generation tokens already.)"""
    fim = engine.fim
    return [engine.piece(t).decode("utf-8", "replace") for t in (fim.pre, fim.suf, fim.mid) if t is not None]
