"""llama-server's POST /slots/{id}?action=save|restore|erase, under --slot-save-path.

save writes slot {id}'s KV cache (its tokens and llama.cpp's state of its sequence) to the
file the body names, `{"filename": NAME}`, inside --slot-save-path; restore puts such a file
back into a slot (a prompt that starts with its tokens then goes there and skips that much
prefill); erase empties the slot. A name is a plain file name: no directory, no path
separator, no "..", no leading dot. A file records the model it was saved from, the key's
cache scope (the digest the store keeps too) and the LoRA adapters (by name, with their scales)
its prompt ran under, and is restored into that model, for that key, only, under that adapter
set: only a request of that set reuses it (a model without one of them refuses it); a slot
holding another key's prompt is empty to a request (slot_state.py). With several API keys
each key's files live in a folder of its own (its scope digest, as the store names it): two
keys saving one name keep two files, and one key never learns another's names. A slot running
a request is a 409. Without --slot-save-path every action is a 501, as llama-server answers.
The model is the body's or `?model=`'s, else the one served.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from ...errors import ApiError
from ...generation import AdapterSet
from ...models.errors import BadAdapter
from ...runtime.slot_state import ERASE, RESTORE, SAVE, SlotBusy, SlotRefused, SlotRequest
from ..exchange import Exchange, RouteTable
from ..failures import refusals
from ..fields import invalid, kind_of
from ..loading import LoadWait, use_model
from ..services import Services
from .errors import LLAMA_ERRORS
from .model_choice import named_model

if TYPE_CHECKING:
    from ...models.served import ServedModel

MAGIC = b"LSSLOT1\n"            # a slot file: MAGIC, a u32 header length, the JSON header, tokens, state
MAX_FILENAME_BYTES = 240         # UTF-8 bytes: the name, a dot before it and a temp suffix fit NAME_MAX (255)
MAX_SLOT_ID_DIGITS = 6
_FILENAME = re.compile(r"[^\x00-\x1f/\\:*?\"<>|\x7f]+")


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/slots/{id_slot}", "POST", partial(slot_action, services), errors=LLAMA_ERRORS)


def slot_action(services: Services, exchange: Exchange) -> None:
    body = exchange.json() if exchange.has_body() else {}
    save_path = services.settings.slot_save_path
    if not save_path:
        raise ApiError(501, "this server saves no slots: start it with --slot-save-path DIR", code="not_supported")
    action = exchange.request.query.get("action")
    if action not in (SAVE, RESTORE, ERASE):
        raise invalid("action", "expected ?action=save, restore or erase")
    filename = None if action == ERASE else read_filename(body)
    name = body.get("model") or named_model(services, exchange.request.query, "/slots/ID")
    scope = exchange.scope.cache
    folder = key_folder(Path(save_path), exchange.scope.owner)
    with use_model(services.ready(), {"model": name}, LoadWait(exchange)) as model:
        seq_id = read_slot_id(exchange.params["id_slot"], model.settings.slots)
        if action == SAVE:
            answer = save(model, seq_id, scope, folder, filename)
        elif action == RESTORE:
            answer = restore(model, seq_id, scope, folder, filename)
        else:
            done = run(model, SlotRequest(ERASE, seq_id, scope))
            answer = {"id_slot": seq_id, "n_erased": done.n_erased}
    exchange.send_json(answer)


def key_folder(save_path: Path, owner: str) -> Path:
    """Where a key's slot files live: --slot-save-path itself with one key or none (llama-server's
    layout), a folder named by the key's scope digest with several; else a save under a name
    another key used would replace that key's file."""
    return save_path / owner if owner else save_path


def read_slot_id(text: str, slots: int) -> int:
    # ASCII digits only: str.isdigit() also takes '²', which int() refuses, and a long run of
    # digits is past int()'s limit; both were 500s.
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_SLOT_ID_DIGITS or int(text) >= slots:
        raise ApiError(400, f"invalid slot id '{text[:20]}': this model has slots 0 to {slots - 1}",
                       param="id_slot", code="invalid_value")
    return int(text)


def read_filename(body: dict) -> str:
    """A plain file name: a client names a file in the directory, never a path out of it."""
    name = body.get("filename")
    if not isinstance(name, str) or not name:
        raise invalid("filename", f"expected the name of a file in --slot-save-path, got {kind_of(name)}")
    if (len(name.encode("utf-8", "surrogatepass")) > MAX_FILENAME_BYTES or not _FILENAME.fullmatch(name) or name.startswith(".") or ".." in name
            or name.strip() != name):
        raise invalid("filename", "expected a plain file name: no directory, path separator, '..', leading dot, "
                                  f"control character or surrounding space, at most {MAX_FILENAME_BYTES} bytes")
    return name


def run(model: ServedModel, request: SlotRequest) -> SlotRequest:
    """The request done on the model's runtime thread; its failure as the client's answer."""
    with refusals():
        model.submit_slot_request(request)
    request.done.wait()
    if isinstance(request.error, SlotBusy):
        raise ApiError(409, f"{request.error}; try again once it ends", code="slot_busy")
    if isinstance(request.error, SlotRefused):
        raise ApiError(400, str(request.error), code="invalid_slot_file")
    if request.error is not None:
        raise request.error
    return request


def fingerprint(model: ServedModel) -> dict:
    """What a state needs to fit a model's cache again: the same model, the same cache layout."""
    engine, info = model.chat.engine, model.chat.engine.info
    return {"model": model.model_id, "architecture": info.architecture, "n_params": info.n_params,
            "n_vocab": info.n_vocab, "n_layer": engine.n_layer, "n_ctx": engine.n_ctx}


def save(model: ServedModel, seq_id: int, scope: str, directory: Path, filename: str) -> dict:
    started = time.monotonic()
    done = run(model, SlotRequest(SAVE, seq_id, scope))
    header = orjson.dumps({**fingerprint(model), "scope": scope, "n_tokens": len(done.tokens),
                           "adapters": adapter_names(model, done.adapters)})
    tokens = struct.pack(f"<{len(done.tokens)}i", *done.tokens)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    if path.is_dir():
        raise ApiError(400, f"'{filename}' is a directory in --slot-save-path", param="filename", code="invalid_value")
    # written whole under a temp name of its own, then renamed: never half a file there, two saves
    # to one name never write into one file, and a link planted at the temp name is never followed
    fd, part = tempfile.mkstemp(dir=directory, prefix=f".{filename}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(MAGIC + struct.pack("<I", len(header)) + header + tokens)
            out.write(done.state)
        os.replace(part, path)
    except OSError as error:        # the disk full, the directory read-only: said, and no part left behind
        Path(part).unlink(missing_ok=True)
        raise ApiError(500, f"could not write slot file '{filename}': {error.strerror}", code="save_failed") from None
    return {"id_slot": seq_id, "filename": filename, "n_saved": len(done.tokens),
            "n_written": path.stat().st_size, "timings": {"save_ms": round((time.monotonic() - started) * 1000, 3)}}


def restore(model: ServedModel, seq_id: int, scope: str, directory: Path, filename: str) -> dict:
    started = time.monotonic()
    data = read_regular_file(directory / filename, filename)
    tokens, state, recorded = read_slot_file(data, fingerprint(model), scope, filename)
    adapters = adapter_set(model, recorded, filename)
    run(model, SlotRequest(RESTORE, seq_id, scope, tokens=tokens, state=state, adapters=adapters))
    return {"id_slot": seq_id, "filename": filename, "n_restored": len(tokens), "n_read": len(data),
            "timings": {"restore_ms": round((time.monotonic() - started) * 1000, 3)}}


def adapter_names(model: ServedModel, adapters: AdapterSet) -> list[list]:
    return model.adapters.names_of(adapters) if model.adapters is not None else []


def adapter_set(model: ServedModel, recorded: object, filename: str) -> AdapterSet:
    """The set a file's prompt ran under, as this model's adapter ids; a 400 when the model lacks
    one (a file from before adapters were recorded ran under none)."""
    if recorded == []:
        return ()
    try:
        if model.adapters is None:
            raise BadAdapter(f"model '{model.entry.name}' has no LoRA adapters")
        return model.adapters.by_names(recorded)
    except BadAdapter as error:
        raise ApiError(400, f"'{filename}' was saved under LoRA adapters, and its cache is theirs alone: "
                            f"{error.message}", param="filename", code="invalid_slot_file") from None


def read_regular_file(path: Path, filename: str) -> bytes:
    """The file's bytes, only when it is a regular file: a FIFO would hold the request (and its
    thread) forever, a device such as /dev/zero would fill memory, a directory was a 500."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ApiError(404, f"no slot file '{filename}' in --slot-save-path", param="filename",
                       code="file_not_found") from None
    except OSError as error:
        raise ApiError(400, f"cannot read '{filename}': {error.strerror}", param="filename",
                       code="invalid_slot_file") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ApiError(400, f"'{filename}' is not a regular file", param="filename", code="invalid_slot_file")
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def read_slot_file(data: bytes, expected: dict, scope: str, filename: str) -> tuple[list[int], bytes, object]:
    """The tokens, state and adapter set (as recorded: adapter_set) a save wrote; a 400 for
    another model's or key's file, or none of ours."""
    bad = ApiError(400, f"'{filename}' is not a slot file this server saved", param="filename",
                   code="invalid_slot_file")
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise bad
    (size,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    try:
        header = orjson.loads(data[start:start + size])
        n_tokens = int(header.pop("n_tokens"))
        saved_scope = header.pop("scope")
        adapters = header.pop("adapters", [])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise bad from None
    if saved_scope != scope:        # another key's prompt: restored, its prefix would answer to this key
        raise ApiError(400, f"'{filename}' was saved with another API key", param="filename",
                       code="invalid_slot_file")
    if header != expected:
        raise ApiError(400, f"'{filename}' was saved from another model or cache layout "
                            f"({header.get('model')}, n_ctx {header.get('n_ctx')}); restore it into that one",
                       param="filename", code="invalid_slot_file")
    at = start + size
    if n_tokens < 0 or len(data) < at + 4 * n_tokens:
        raise bad
    tokens = list(struct.unpack_from(f"<{n_tokens}i", data, at))
    if any(token >= expected["n_vocab"] for token in tokens):     # negative: an image's placeholder
        raise ApiError(400, f"'{filename}' holds token ids outside this model's vocabulary", param="filename",
                       code="invalid_slot_file")
    return tokens, data[at + 4 * n_tokens:], adapters
