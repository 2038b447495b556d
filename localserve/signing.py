"""Signatures the server puts on text it hands out and checks when that text comes back.

Anthropic clients return thinking blocks in later requests with the `signature` the
server gave them; a block whose signature does not verify was not written by this
server (or was edited) and is refused. The signature is the text sealed under a key
only the server knows (authenticated encryption, below), so a block that comes back
with its text left out (thinking display "omitted") still renders the prompt it was
generated in. Signatures of the first version (an HMAC-SHA256 of the text) still verify.

Sealing is deterministic authenticated encryption in the SIV style, from the standard
library alone: the tag is an HMAC-SHA256 of the text (cut to 16 bytes), the keystream
SHAKE-256 of an encryption key and the tag. The same text seals to the same token (a
streamed and a whole answer carry the same signature); a changed byte fails the tag.

The key lives in the data directory (`signing.key`, mode 0600), so signatures stay
valid across restarts: a long agent session survives the daemon being restarted.
With --no-store, or when the data directory cannot be written, the key is random
for the life of the process instead (signatures then expire with the process).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

log = logging.getLogger("localserve.signing")

KEY_FILE = "signing.key"
KEY_BYTES = 32
_DOMAIN = b"localserve thinking v1\x00"   # a signature for one purpose is no use for another


def load_signing_key(data_dir: Path | None) -> bytes:
    """The persisted key under data_dir (created on first use); a per-process key without one."""
    if data_dir is None:
        return secrets.token_bytes(KEY_BYTES)
    path = Path(data_dir) / KEY_FILE
    try:
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
        log.warning("%s is not a %d-byte key; writing a new one", path, KEY_BYTES)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot read %s (%s): thinking signatures last only for this process", path, exc)
        return secrets.token_bytes(KEY_BYTES)
    key = secrets.token_bytes(KEY_BYTES)
    tmp = path.with_name(f"{KEY_FILE}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        try:
            os.link(tmp, path)          # atomic and never overwrites: two starting servers agree
        except FileExistsError:
            existing = path.read_bytes()
            if len(existing) == KEY_BYTES:
                key = existing              # another process wrote it first
            else:
                os.replace(tmp, path)       # a damaged key file: ours replaces it
    except OSError as exc:
        log.warning("cannot write %s (%s): thinking signatures last only for this process", path, exc)
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    return key


def sign(key: bytes, text: str) -> str:
    """The thinking text sealed: verify() checks it, recover() gives the text back."""
    return seal(key, text, _THINKING)


def verify(key: bytes, text: str, signature: object) -> bool:
    if not isinstance(signature, str) or not signature.isascii():
        return False
    if signature.startswith(_SEAL_PREFIX):
        return unseal(key, signature, _THINKING) == text
    return hmac.compare_digest(_hmac_signature(key, text), signature)   # the first version


def recover(key: bytes, signature: object) -> str | None:
    """The text a signature seals; None when it is not one of ours (or was changed)."""
    return unseal(key, signature, _THINKING) if isinstance(signature, str) else None


def _hmac_signature(key: bytes, text: str) -> str:
    digest = hmac.new(key, _DOMAIN + text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


# ---- sealing -------------------------------------------------------------------------

def seal(key: bytes, text: str, purpose: bytes) -> str:
    """`text` encrypted and authenticated under `key`, for one `purpose` (a token sealed
    for one purpose does not open for another)."""
    enc_key, mac_key = _subkeys(key, purpose)
    plain = text.encode("utf-8")
    tag = hmac.new(mac_key, plain, hashlib.sha256).digest()[:_TAG_BYTES]
    return _SEAL_PREFIX + base64.b64encode(tag + _xor(plain, _keystream(enc_key, tag, len(plain)))).decode("ascii")


def unseal(key: bytes, token: str, purpose: bytes) -> str | None:
    """The sealed text, or None when the token is malformed, forged or altered."""
    if not token.startswith(_SEAL_PREFIX):
        return None
    try:
        raw = base64.b64decode(token[len(_SEAL_PREFIX):], validate=True)
    except ValueError:
        return None
    if len(raw) < _TAG_BYTES:
        return None
    enc_key, mac_key = _subkeys(key, purpose)
    tag, cipher = raw[:_TAG_BYTES], raw[_TAG_BYTES:]
    plain = _xor(cipher, _keystream(enc_key, tag, len(cipher)))
    if not hmac.compare_digest(hmac.new(mac_key, plain, hashlib.sha256).digest()[:_TAG_BYTES], tag):
        return None
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:
        return None


_THINKING = b"anthropic thinking"
_SEAL_PREFIX = "ls1."
_TAG_BYTES = 16


def _subkeys(key: bytes, purpose: bytes) -> tuple[bytes, bytes]:
    def derive(label: bytes) -> bytes:
        return hmac.new(key, b"localserve seal v1\x00" + label + b"\x00" + purpose, hashlib.sha256).digest()
    return derive(b"encrypt"), derive(b"authenticate")


def _keystream(enc_key: bytes, tag: bytes, size: int) -> bytes:
    return hashlib.shake_256(enc_key + tag).digest(size) if size else b""


def _xor(data: bytes, stream: bytes) -> bytes:
    if not data:
        return b""
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(data), "big")
