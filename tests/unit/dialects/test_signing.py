"""dialects/signing.py: sealed blobs and thinking signatures refuse every change.

A blob is URL-safe base64 of version (1 byte) + nonce (16) + ciphertext + tag (32). Each
tamper below changes bytes of one part only and encodes the result again, so the blob stays
well-formed (right version, right length, valid base64): only the tag check can refuse it.
"""

from __future__ import annotations

import base64

import pytest

from localserve.dialects.signing import (NONCE_BYTES, REASONING, SEAL_VERSION, TAG_BYTES, THINKING, recover, seal,
                                         scoped_signing_key, sign, unseal, verify)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
TEXT = "The user wants the weather; call get_weather for Paris first."


def raw(blob: str) -> bytes:
    return base64.urlsafe_b64decode(blob)


def encoded(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def parts(blob: str) -> tuple[slice, slice, slice]:
    """The byte ranges of the nonce, the ciphertext and the tag in a blob."""
    n = len(raw(blob))
    return slice(1, 1 + NONCE_BYTES), slice(1 + NONCE_BYTES, n - TAG_BYTES), slice(n - TAG_BYTES, n)


def flipped(blob: str, index: int, bit: int = 0x01) -> str:
    data = bytearray(raw(blob))
    data[index] ^= bit
    return encoded(bytes(data))


def test_a_blob_opens_with_its_key_and_purpose_and_has_the_layout():
    blob = seal(KEY, TEXT)
    assert unseal(KEY, blob) == TEXT
    data = raw(blob)
    assert data[:1] == SEAL_VERSION and len(data) == 1 + NONCE_BYTES + len(TEXT.encode()) + TAG_BYTES
    assert TEXT.encode() not in data                    # encrypted, not merely signed
    assert seal(KEY, TEXT) == blob                      # deterministic: a stream and a whole answer agree


@pytest.mark.parametrize("part", ["nonce", "ciphertext", "tag"])
def test_every_byte_of_each_part_flipped_is_refused(part):
    blob = seal(KEY, TEXT)
    where = dict(zip(("nonce", "ciphertext", "tag"), parts(blob)))[part]
    for index in range(where.start, where.stop):
        for bit in (0x01, 0x80):
            bad = flipped(blob, index, bit)
            assert len(raw(bad)) == len(raw(blob)) and raw(bad)[:1] == SEAL_VERSION     # well-formed
            assert unseal(KEY, bad) is None, (part, index, bit)


def test_a_ciphertext_flip_that_still_decodes_as_text_is_refused():
    # Flipping the low bit of an ASCII byte keeps the plaintext valid UTF-8 ("T" → "U"): only
    # the tag can tell, so a missing or skipped tag check shows here as text that was never sealed.
    blob = seal(KEY, TEXT)
    _, cipher, _ = parts(blob)
    assert unseal(KEY, flipped(blob, cipher.start)) is None


def test_swapped_parts_between_two_blobs_are_refused():
    one, two = raw(seal(KEY, TEXT)), raw(seal(KEY, TEXT.upper()))
    nonce, cipher, tag = parts(seal(KEY, TEXT))
    for mixed in (one[:nonce.stop] + two[cipher] + one[tag],     # another blob's ciphertext
                  one[:1] + two[nonce] + one[cipher] + one[tag],  # another blob's nonce
                  one[:tag.start] + two[tag]):                    # another blob's tag
        assert unseal(KEY, encoded(mixed)) is None


def test_another_key_purpose_or_version_is_refused():
    blob = seal(KEY, TEXT)
    assert unseal(OTHER_KEY, blob) is None
    assert unseal(KEY, blob, THINKING) is None and unseal(KEY, seal(KEY, TEXT, THINKING), REASONING) is None
    other_version = encoded(b"\x02" + raw(blob)[1:])
    assert unseal(KEY, other_version) is None


@pytest.mark.parametrize("blob", [None, 7, "", "not a blob", "====", "\u00e9t\u00e9",
                                  encoded(SEAL_VERSION + bytes(NONCE_BYTES + TAG_BYTES - 1))])
def test_malformed_blobs_are_refused(blob):
    assert unseal(KEY, blob) is None


def test_cut_or_extended_blobs_are_refused():
    data = raw(seal(KEY, TEXT))
    for bad in (data[:-1], data[:-TAG_BYTES], data + b"\x00", data[:1 + NONCE_BYTES] + data[-TAG_BYTES:]):
        assert unseal(KEY, encoded(bad)) is None


def test_thinking_signatures_verify_only_their_own_text():
    signature = sign(KEY, TEXT)
    assert verify(KEY, TEXT, signature) and recover(KEY, signature) == TEXT
    assert not verify(KEY, TEXT + ".", signature) and not verify(OTHER_KEY, TEXT, signature)
    nonce, cipher, tag = parts(signature)
    for index in (nonce.start, cipher.start, cipher.stop - 1, tag.start, tag.stop - 1):
        bad = flipped(signature, index)
        assert not verify(KEY, TEXT, bad) and recover(KEY, bad) is None
    assert not verify(KEY, TEXT, None) and not verify(KEY, TEXT, "sig\u00e9")


def test_what_one_api_keys_requests_are_handed_opens_for_that_key_only():
    """Several API keys (wire/access.py): each scope seals and signs with a key of its own."""
    k1, k2 = scoped_signing_key(KEY, "scope-1"), scoped_signing_key(KEY, "scope-2")
    assert scoped_signing_key(KEY, "") == KEY                  # one key or none: the server's own
    assert unseal(k1, seal(k1, TEXT)) == TEXT
    assert unseal(k2, seal(k1, TEXT)) is None and unseal(KEY, seal(k1, TEXT)) is None
    assert not verify(k2, TEXT, sign(k1, TEXT))
