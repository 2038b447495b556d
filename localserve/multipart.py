"""A ``multipart/form-data`` body (RFC 7578 over RFC 2046's multipart framing), parsed from bytes.

Strategy: the body has already arrived whole (http_body.py held it to --max-body-bytes); here
it is cut at its delimiter lines, each part's head is read as a few header lines, and its
content is kept as a view into the body, never copied twice. Every size is checked before
anything is made of it: the boundary (RFC 2046: 1 to 70 characters of its alphabet), the
preamble, the number of parts, each part's head, each text field, each file. One error type,
:class:`MultipartError`, carries the message and the field it names; the caller answers it as a
400 in its dialect's shape. No I/O here: :func:`parse_form` takes the Content-Type and the body.

What is read of a part's head: ``Content-Disposition: form-data; name="..."; filename="..."``
(or RFC 5987's ``filename*=UTF-8''...`` alone; a part without a name is refused) and
``Content-Type``. A part with a filename is a file;
any other is a text field, which must be UTF-8. A field may repeat only when its name ends in
``[]`` (OpenAI's ``timestamp_granularities[]``): then its values are a list, and no file may
have its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from .errors import InputRefused

MAX_BOUNDARY = 70                  # RFC 2046 §5.1.1
MAX_PREAMBLE = 1024                # bytes before the first delimiter (clients send none)
MAX_PARTS = 32                     # OpenAI's transcription form has a dozen fields
MAX_PART_HEAD_BYTES = 8192         # one part's header lines
MAX_FIELD_BYTES = 64 * 1024        # one text field (a prompt included)

_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
_PARAM = re.compile(r';\s*([A-Za-z0-9_*-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))')


class MultipartError(InputRefused):
    """Why a form is not taken; param: the field it names (or "body")."""
    code = "invalid_multipart"

    def __init__(self, message: str, param: str = "body"):
        super().__init__(message, param=param)


class FileTooLarge(MultipartError):
    """A file past the caller's max_file_bytes: the caller names its own limit."""

    def __init__(self, name: str, size: int, limit: int):
        super().__init__(f"the file '{name}' is {size} bytes, more than {limit} are taken", name)
        self.size = size


@dataclass(frozen=True)
class FilePart:
    filename: str
    content_type: str | None
    data: memoryview = field(repr=False)

    def __len__(self) -> int:
        return len(self.data)


@dataclass
class Form:
    fields: dict[str, str | list[str]] = field(default_factory=dict)
    files: dict[str, FilePart] = field(default_factory=dict)


def boundary_of(content_type: str | None) -> str:
    """The boundary of a multipart/form-data Content-Type; MultipartError otherwise."""
    kind, _, rest = (content_type or "").partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise MultipartError(f"expected Content-Type multipart/form-data, got {(content_type or 'none')[:80]!r}")
    params = {m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
              for m in _PARAM.finditer(";" + rest)}
    boundary = params.get("boundary")
    if not boundary or len(boundary) > MAX_BOUNDARY or not _BOUNDARY.fullmatch(boundary):
        raise MultipartError(f"the multipart boundary must be 1 to {MAX_BOUNDARY} characters of RFC 2046's alphabet")
    return boundary


def parse_form(content_type: str | None, body: bytes | bytearray, *, max_file_bytes: int) -> Form:
    """The form's text fields and files, every limit held; MultipartError naming what broke one."""
    delimiter = b"--" + boundary_of(content_type).encode("ascii")
    view = memoryview(body)
    start = _first_delimiter(body, delimiter)
    form, count, at = Form(), 0, start + len(delimiter)
    while True:
        if body[at:at + 2] == b"--":
            return form                     # the close delimiter; what follows is an epilogue
        at = _line_end(body, at)
        count += 1
        if count > MAX_PARTS:
            raise MultipartError(f"the form has more than MAX_PARTS ({MAX_PARTS}) parts")
        head_end = _head_end(body, at)
        if head_end < 0:
            raise MultipartError(f"part {count}'s header lines end nowhere within MAX_PART_HEAD_BYTES "
                                 f"({MAX_PART_HEAD_BYTES})" if len(body) - at > MAX_PART_HEAD_BYTES
                                 else f"the body ends inside part {count}'s header lines")
        name, filename, part_type = _head(bytes(body[at:head_end]), count)
        content = head_end + 4
        end = body.find(b"\r\n" + delimiter, content)
        if end < 0:
            raise MultipartError(f"the body ends inside part {count} ('{name}'): no delimiter closes it", name)
        _add(form, name, filename, part_type, view[content:end], max_file_bytes)
        at = end + 2 + len(delimiter)


def _first_delimiter(body: bytes | bytearray, delimiter: bytes) -> int:
    if body.startswith(delimiter):
        return 0
    found = body.find(b"\r\n" + delimiter, 0, MAX_PREAMBLE + len(delimiter) + 2)
    if found < 0:
        raise MultipartError("the body does not start with the Content-Type's boundary")
    return found + 2


def _line_end(body: bytes | bytearray, at: int) -> int:
    """After a delimiter: optional padding, then CRLF; where the next line starts."""
    stop = at
    while stop < len(body) and stop - at < 64 and body[stop] in b" \t":
        stop += 1
    if body[stop:stop + 2] != b"\r\n":
        raise MultipartError("a boundary line is not followed by CRLF" if stop + 2 <= len(body)
                             else "the body ends after a boundary line without the closing one")
    return stop + 2


def _head_end(body: bytes | bytearray, at: int) -> int:
    """Where the blank line after a part's head starts (-1: none within MAX_PART_HEAD_BYTES); a
    blank line at once is an empty head, whose CRLF before it ended the delimiter line."""
    if body[at:at + 2] == b"\r\n":
        return at - 2
    return body.find(b"\r\n\r\n", at, at + MAX_PART_HEAD_BYTES + 4)


def _head(head: bytes, count: int) -> tuple[str, str | None, str | None]:
    """(name, filename or None, content type or None) of a part's header lines."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        raise MultipartError(f"part {count}'s header lines are not UTF-8") from None
    disposition, part_type = None, None
    for line in text.split("\r\n") if text else ():
        key, colon, value = line.partition(":")
        if not colon:
            raise MultipartError(f"part {count} has a header line without a colon")
        key = key.strip().lower()
        if key == "content-disposition":
            disposition = value.strip()
        elif key == "content-type":
            part_type = value.strip()
    kind, _, rest = (disposition or "").partition(";")
    if kind.strip().lower() != "form-data":
        raise MultipartError(f"part {count} has no Content-Disposition: form-data")
    params = {m.group(1).lower(): _unquote(m.group(2)) if m.group(2) is not None else m.group(3)
              for m in _PARAM.finditer(";" + rest)}
    name = params.get("name")
    if not name:
        raise MultipartError(f"part {count} has no name")
    filename = params.get("filename")
    if filename is None and params.get("filename*") is not None:
        filename = _extended_value(params["filename*"])
    return name, filename, part_type


def _unquote(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def _extended_value(value: str) -> str:
    """RFC 5987's charset'language'percent-encoded value (filename*=UTF-8''a%20b.wav), which
    RFC 7578 asks senders not to use and some send alone for a name that is not ASCII."""
    charset, quote, rest = value.partition("'")
    _language, _, encoded = rest.partition("'")
    try:
        return unquote(encoded if quote else value, encoding=charset if quote else "utf-8", errors="replace")
    except LookupError:               # a charset Python does not know
        return unquote(encoded, errors="replace")


def _add(form: Form, name: str, filename: str | None, part_type: str | None, data: memoryview,
         max_file_bytes: int) -> None:
    if filename is not None:
        if len(data) > max_file_bytes:
            raise FileTooLarge(name, len(data), max_file_bytes)
        if name in form.files or name in form.fields:
            raise MultipartError(f"the form has two parts named '{name}'; send one", name)
        form.files[name] = FilePart(filename, part_type, data)
        return
    if len(data) > MAX_FIELD_BYTES:
        raise MultipartError(f"the field '{name}' is {len(data)} bytes, more than MAX_FIELD_BYTES "
                             f"({MAX_FIELD_BYTES}) allows", name)
    try:
        value = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise MultipartError(f"the field '{name}' is not UTF-8 text", name) from None
    if name.endswith("[]") and name not in form.files:
        listed = form.fields.setdefault(name, [])
        if isinstance(listed, list):
            listed.append(value)
            return
    if name in form.fields or name in form.files:
        raise MultipartError(f"the form has two parts named '{name}'; send one", name)
    form.fields[name] = value
