"""The Jinja environment chat templates run in: Hugging Face's renderer, made to run real templates.

HF renders with jinja2's immutable sandbox, ``trim_blocks`` and ``lstrip_blocks``, the
``loopcontrols`` extension, a ``{% generation %}`` tag, ``tojson`` with json.dumps' signature and
the globals ``raise_exception`` and ``strftime_now``. Real templates need two things more:

- mutating lists and dicts the template made itself (Kimi K2 keeps a queue of call ids with
  ``ids.append(...)`` and ``ids.pop(0)``). The values we hand in stay immutable: each render
  names them (:func:`render`), and only they are refused ``append``/``update``/``pop``/...;
- ``tojson`` of a generator (DeepSeek R1's ``tools | map(attribute='function') | tojson``).

Every failure, the template's own ``raise_exception`` included, is one :class:`TemplateError`
whose message is fit for a 400 and names the template line it happened on.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable

from . import hf_json

__all__ = ["OutputTooLong", "TemplateError", "at_moment", "compile_template", "now", "render", "tojson"]


class TemplateError(Exception):
    """A chat template could not be loaded or rendered; the message is fit for a 400."""


class OutputTooLong(Exception):
    """A render passed its max_chars: stopped at `chars` characters of output."""

    def __init__(self, chars: int):
        super().__init__(f"the template's output passed {chars} characters")
        self.chars = chars


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
           separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters; HF's does not, and prompts must carry
    # HF's exact text (hf_json writes it).
    return hf_json.dumps(_plain(value), ensure_ascii=ensure_ascii, indent=indent,
                         separators=separators, sort_keys=sort_keys)


def _plain(value: Any) -> Any:
    """Generators and other one-pass iterables (``map``, ``select``) as lists, at any depth."""
    if isinstance(value, (types.GeneratorType, Iterator)):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, dict) and any(isinstance(v, (types.GeneratorType, Iterator)) for v in value.values()):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _raise_exception(message: Any) -> None:
    raise TemplateError(str(message))


# The time templates show (strftime_now; Llama 3's date_string, firefunction's datetime): the wall
# clock, or one moment held over renders that are compared with each other (at_moment), which a
# second or a day turning between them would otherwise tell apart.
_MOMENT: contextvars.ContextVar[datetime | None] = contextvars.ContextVar("moment", default=None)


def now() -> datetime:
    """The time a template rendered now shows."""
    return _MOMENT.get() or datetime.now()


@contextlib.contextmanager
def at_moment(moment: datetime | None = None) -> Iterator[datetime]:
    """Every render in the block shows `moment` (by default the time on entering) as the time."""
    held = moment or datetime.now()
    token = _MOMENT.set(held)
    try:
        yield held
    finally:
        _MOMENT.reset(token)


def _strftime_now(fmt: str) -> str:
    return now().strftime(fmt)


class _GenerationTag(jinja2.ext.Extension):
    """HF's ``{% generation %}…{% endgeneration %}`` (a training-mask marker): render the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


# The ids of the lists and dicts handed to the render running in this context: these stay immutable.
_FROZEN: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("frozen", default=frozenset())


class _TemplateSandbox(SandboxedEnvironment):
    """The sandbox, where a template may change the lists and dicts it made, not ours."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        return not (modifies_known_mutable(obj, attr) and id(obj) in _FROZEN.get())


_ENV = _TemplateSandbox(trim_blocks=True, lstrip_blocks=True,
                        extensions=[jinja2.ext.loopcontrols, _GenerationTag])
_ENV.filters["tojson"] = tojson
_ENV.globals["raise_exception"] = _raise_exception
_ENV.globals["strftime_now"] = _strftime_now


# Templates kept compiled (and probed, prompt/templates.py): more than llama.cpp's corpus of 70, so
# a server with many models, or the corpus tests, never compile or probe one template twice.
TEMPLATES_CACHED = 128


@functools.lru_cache(maxsize=TEMPLATES_CACHED)
def compile_template(text: str) -> jinja2.Template:
    try:
        return _ENV.from_string(text)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template syntax error on line {e.lineno}: {e.message}") from None


def render(text: str, variables: dict, max_chars: int | None = None) -> str:
    """The template's output for ``variables``, whose lists and dicts the template may not change;
    OutputTooLong as soon as it passes ``max_chars`` (a template writes as it loops: the rest of
    the conversation is never rendered)."""
    template = compile_template(text)
    token = _FROZEN.set(frozenset(_container_ids(variables)))
    try:
        if max_chars is None:
            return template.render(variables)
        return _bounded(template.generate(variables), max_chars)
    except OutputTooLong:
        raise
    except TemplateError as e:
        raise TemplateError(f"{e}{_where(e)}") from None
    except jinja2.TemplateError as e:
        raise TemplateError(f"chat template error{_where(e)}: {e.message or type(e).__name__}") from None
    except Exception as e:  # a template can make Python raise anything (TypeError, ...)
        raise TemplateError(f"chat template error{_where(e)}: {type(e).__name__}: {e}") from None
    finally:
        _FROZEN.reset(token)


def _bounded(parts: Iterator[str], max_chars: int) -> str:
    kept, chars = [], 0
    for part in parts:
        chars += len(part)
        if chars > max_chars:
            raise OutputTooLong(chars)
        kept.append(part)
    return "".join(kept)


def _container_ids(value: Any, found: set[int] | None = None) -> set[int]:
    found = set() if found is None else found
    if isinstance(value, (list, dict)) and id(value) not in found:
        found.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            _container_ids(item, found)
    return found


def _where(error: BaseException) -> str:
    """' (template line N)': the innermost template frame of the error's traceback."""
    line = None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (template line {line})" if line else ""
