"""Signatures and sealed blobs: what the server puts on text it hands out and checks when that
text comes back.

Anthropic clients return thinking blocks in later requests with the `signature` the
server gave them; a block whose signature does not verify was not written by this
server (or was edited) and is refused. The signature is the thinking text sealed (below),
so a block that comes back with its text left out (thinking display "omitted") still
renders the prompt it was generated in. Signatures of the first version (an HMAC-SHA256
of the text) still verify.

Compaction items carry their summary sealed the same way (dialects/compaction.py).

Responses reasoning items carry `encrypted_content` (`seal`): the reasoning text encrypted and
authenticated, so a client that keeps no server state (store: false) can hand it back and the
next prompt renders the reasoning exactly as it was generated.

The cipher is built from the standard library alone, deterministic in the SIV style: the
nonce is an HMAC of the text, the keystream SHAKE-256 over (key, nonce) XORed with the text,
then HMAC-SHA256 over everything before the tag (encrypt-then-MAC). The same text seals to
the same blob, so a streamed and a whole answer carry the same one. Sub-keys are derived
for each purpose (thinking signatures, reasoning items), so a blob sealed for one does not
open for another. With several API keys, each key's requests sign and seal with a key derived
for its scope (scoped_signing_key), so a blob handed to one key does not open for another.

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


def scoped_signing_key(key: bytes, scope: str) -> bytes:
    """The key for what one API key's requests are handed (wire/access.py's scopes): the server's
    own for the one scope of a server with a single key or none, else one derived for the scope,
    so a signature or blob made for one key neither verifies nor opens for another."""
    if not scope:
        return key
    return hmac.new(key, b"localserve scope v1\x00" + scope.encode("ascii"), hashlib.sha256).digest()


def sign(key: bytes, text: str) -> str:
    """The thinking text sealed: verify() checks it, recover() gives the text back."""
    return seal(key, text, THINKING)


def verify(key: bytes, text: str, signature: object) -> bool:
    if not isinstance(signature, str) or not signature.isascii():
        return False
    if unseal(key, signature, THINKING) == text:
        return True
    return hmac.compare_digest(_hmac_signature(key, text), signature)   # the first version


def recover(key: bytes, signature: object) -> str | None:
    """The thinking text a signature seals; None when it is not one of ours (or was changed)."""
    return unseal(key, signature, THINKING)


def _hmac_signature(key: bytes, text: str) -> str:
    digest = hmac.new(key, _DOMAIN + text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


# ---- sealing -------------------------------------------------------------------------

REASONING = b"responses reasoning"      # purposes: a blob sealed for one does not open for another
THINKING = b"anthropic thinking"
COMPACTION = b"compaction summary"      # a compaction's summary (dialects/compaction.py)
SEAL_VERSION = b"\x01"
NONCE_BYTES = 16
TAG_BYTES = 32


def seal(key: bytes, text: str, purpose: bytes = REASONING) -> str:
    """`text` encrypted and authenticated under `key`, as URL-safe base64."""
    data = text.encode("utf-8")
    nonce = hmac.new(_subkey(key, b"seal nonce v1", purpose), data, hashlib.sha256).digest()[:NONCE_BYTES]
    body = SEAL_VERSION + nonce + _xor(data, _keystream(key, purpose, nonce, len(data)))
    tag = hmac.new(_subkey(key, b"seal mac v1", purpose), body, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(body + tag).decode("ascii")


def unseal(key: bytes, blob: object, purpose: bytes = REASONING) -> str | None:
    """The text `seal` sealed, or None when the blob was not sealed by this key for this
    purpose, or was altered."""
    if not isinstance(blob, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(blob.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        return None
    if len(raw) < 1 + NONCE_BYTES + TAG_BYTES or raw[:1] != SEAL_VERSION:
        return None
    body, tag = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
    if not hmac.compare_digest(hmac.new(_subkey(key, b"seal mac v1", purpose), body, hashlib.sha256).digest(), tag):
        return None
    nonce, cipher = body[1:1 + NONCE_BYTES], body[1 + NONCE_BYTES:]
    try:
        return _xor(cipher, _keystream(key, purpose, nonce, len(cipher))).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _subkey(key: bytes, label: bytes, purpose: bytes) -> bytes:
    return hmac.new(key, b"localserve " + label + b"\x00" + purpose, hashlib.sha256).digest()


def _keystream(key: bytes, purpose: bytes, nonce: bytes, length: int) -> bytes:
    return hashlib.shake_256(_subkey(key, b"seal stream v1", purpose) + nonce).digest(length) if length else b""


def _xor(data: bytes, stream: bytes) -> bytes:
    if not data:
        return b""
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(data), "big")
