"""Markup a template writes around the answer itself, which belongs to no one: neither content
nor reasoning nor a call. Protocol-neutral: text in, text out.

Some templates frame an assistant's plain answer in markup of their own, and a model trained on
them writes it too: functionary v3.2 answers on a channel named "all" (the generation prompt
ends in ``>>>``, so the answer opens with ``all\\n``; later ones with ``>>>all\\n``), Kimi K3
wraps it in ``<|open|>response<|sep|>`` … ``<|close|>response<|sep|>``, Solar Open opens it with
``<|begin|>assistant<|content|>`` after its reasoning, Command R7B in ``<|START_RESPONSE|>``,
Cohere2 in ``<|START_TEXT|>``, GigaChat 3 ends each message with ``<|message_sep|>`` (the answer's
text, before the call that follows it as a message of its own).
The filter drops that markup from the content stream, before the tool-call projector (a call's
markup is never among it). Like the other text stages it holds back only a possible partial
marker, so any split of the text into chunks gives the same result as the whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from .json_stream import partial_start


@dataclass(frozen=True)
class ContentMarkup:
    name: str
    opening: str                 # what opens the answer at the start of the content (after whitespace)
    markers: tuple[str, ...]     # markup dropped wherever it appears in the content


# (a text the template's source holds → its markup), in detection order
_KNOWN: tuple[tuple[str, ContentMarkup], ...] = (
    (">>>all", ContentMarkup("functionary_v3_2", "all\n", (">>>all\n",))),
    ("open_tag('response')", ContentMarkup("kimi_k3", "", (
        "<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"))),
    ("<|begin|>assistant<|content|>", ContentMarkup("solar", "", ("<|begin|>assistant", "<|content|>"))),
    ("<|START_RESPONSE|>", ContentMarkup("command_r", "", ("<|START_RESPONSE|>", "<|END_RESPONSE|>"))),
    ("<|START_TEXT|>", ContentMarkup("command_r2", "", ("<|START_TEXT|>", "<|END_TEXT|>"))),
    ("<|message_sep|>", ContentMarkup("gigachat", "", ("<|message_sep|>",))),
)


def detect_content_markup(chat_template: str | None) -> ContentMarkup | None:
    text = chat_template or ""
    return next((markup for marker, markup in _KNOWN if marker in text), None)


class MarkupFilter:
    """Streams content with the template's own answer markup taken out."""

    def __init__(self, markup: ContentMarkup):
        self.markup = markup
        self._buf = ""
        self._at_start = bool(markup.opening)

    @property
    def held(self) -> str:
        """Text fed but not passed on yet: a possible marker waiting for the next chunk."""
        return self._buf

    def feed(self, text: str) -> str:
        self._buf += text
        return self._run(final=False)

    def finish(self) -> str:
        return self._run(final=True)

    def _run(self, final: bool) -> str:
        buf, opening = self._buf, self.markup.opening
        if self._at_start:
            body = buf.lstrip()
            if body.startswith(opening):
                buf, self._at_start = body[len(opening):], False
            elif opening.startswith(body) and not final:
                return ""
            else:
                self._at_start = False
        out = []
        while True:
            found = [(at, m) for m in self.markup.markers if (at := buf.find(m)) >= 0]
            partial = None if final else partial_start(buf, self.markup.markers)
            if found and (partial is None or min(found)[0] <= partial):
                at, marker = min(found)
                out.append(buf[:at])
                buf = buf[at + len(marker):]
                continue
            safe = len(buf) if partial is None else partial
            out.append(buf[:safe])
            self._buf = buf[safe:]
            return "".join(out)
