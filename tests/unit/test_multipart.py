"""localserve/multipart.py on bytes alone: what a form is read into, and every limit and malformation a
MultipartError naming what broke (the field where there is one)."""

from __future__ import annotations

import pytest

from localserve.multipart import (MAX_FIELD_BYTES, MAX_PART_HEAD_BYTES, MAX_PARTS, MultipartError,
                                       boundary_of, parse_form)

B = "----localserve-test"
CT = f"multipart/form-data; boundary={B}"


def form(*parts: tuple[str, bytes, str | None], boundary: str = B) -> bytes:
    out = b""
    for name, data, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        if filename:
            out += b"Content-Type: audio/wav\r\n"
        out += b"\r\n" + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def parse(body: bytes, content_type: str = CT, max_file_bytes: int = 1 << 20):
    return parse_form(content_type, body, max_file_bytes=max_file_bytes)


def test_fields_and_a_file_as_the_openai_sdk_sends_them():
    body = form(("model", b"tiny", None), ("file", b"RIFF\r\n--not-the-boundary\r\n", "a.wav"),
                ("timestamp_granularities[]", b"word", None), ("timestamp_granularities[]", b"segment", None),
                ("prompt", "caf\u00e9".encode(), None))
    got = parse(body)
    assert got.fields == {"model": "tiny", "timestamp_granularities[]": ["word", "segment"], "prompt": "caf\u00e9"}
    assert bytes(got.files["file"].data) == b"RIFF\r\n--not-the-boundary\r\n"
    assert got.files["file"].filename == "a.wav" and got.files["file"].content_type == "audio/wav"


def test_quoted_boundaries_preambles_and_epilogues():
    assert boundary_of('multipart/form-data; boundary="a b:c"') == "a b:c"
    body = b"preamble\r\n" + form(("x", b"1", None)) + b"epilogue"
    assert parse(body).fields == {"x": "1"}
    assert parse(form(("x", b"", None))).fields == {"x": ""}             # an empty field is a field


@pytest.mark.parametrize("content_type", [None, "application/json", "multipart/form-data",
                                          "multipart/form-data; boundary=", f"multipart/form-data; boundary={'a' * 71}",
                                          "multipart/form-data; boundary=bad\x00char", "multipart/mixed; boundary=x"])
def test_a_content_type_without_a_good_boundary_is_refused(content_type):
    with pytest.raises(MultipartError):
        parse(form(("x", b"1", None)), content_type)


def test_truncated_bodies_are_refused_wherever_they_stop():
    body = form(("model", b"tiny", None), ("file", b"RIFF" * 100, "a.wav"))
    for cut in (0, 10, len(f"--{B}\r\n") + 5, body.index(b"RIFF") + 50, len(body) - len(f"--{B}--\r\n") + 1):
        with pytest.raises(MultipartError):
            parse(body[:cut])


def test_the_parts_count_the_field_and_the_file_sizes_are_held():
    with pytest.raises(MultipartError, match="MAX_PARTS"):
        parse(form(*[(f"f{i}", b"1", None) for i in range(MAX_PARTS + 1)]))
    assert len(parse(form(*[(f"f{i}", b"1", None) for i in range(MAX_PARTS)])).fields) == MAX_PARTS
    with pytest.raises(MultipartError) as caught:
        parse(form(("prompt", b"x" * (MAX_FIELD_BYTES + 1), None)))
    assert caught.value.param == "prompt"
    assert parse(form(("prompt", b"x" * MAX_FIELD_BYTES, None))).fields["prompt"] == "x" * MAX_FIELD_BYTES
    with pytest.raises(MultipartError) as caught:
        parse(form(("file", b"x" * 101, "a.wav")), max_file_bytes=100)
    assert caught.value.param == "file"
    assert len(parse(form(("file", b"x" * 100, "a.wav")), max_file_bytes=100).files["file"]) == 100


def test_a_huge_part_head_is_refused_without_a_search_past_its_limit():
    body = f"--{B}\r\nContent-Disposition: form-data; name=\"x\"\r\nX-Pad: ".encode() + b"a" * (MAX_PART_HEAD_BYTES * 4)
    with pytest.raises(MultipartError, match="MAX_PART_HEAD_BYTES"):
        parse(body + b"\r\n\r\n1\r\n--" + B.encode() + b"--")


@pytest.mark.parametrize("parts", [
    (("file", b"a", "a.wav"), ("file", b"b", "b.wav")),          # two files
    (("model", b"a", None), ("model", b"b", None)),               # a field twice
    (("model", b"a", None), ("model", b"b", "b.wav")),            # a field and a file of one name
])
def test_a_name_given_twice_is_refused_naming_it(parts):
    with pytest.raises(MultipartError) as caught:
        parse(form(*parts))
    assert caught.value.param == parts[0][0]


@pytest.mark.parametrize("parts", [
    (("a[]", b"x", "x.wav"), ("a[]", b"1", None)),                # a file, then a listed field of its name
    (("a[]", b"1", None), ("a[]", b"x", "x.wav")),                # and the other way round
])
def test_a_listed_name_that_is_also_a_file_is_refused_in_either_order(parts):
    with pytest.raises(MultipartError) as caught:
        parse(form(*parts))
    assert caught.value.param == "a[]"


def test_a_part_with_no_header_lines_is_refused_for_what_it_lacks():
    """The blank line straight after the delimiter ends an empty head: not a body cut short."""
    with pytest.raises(MultipartError, match="no Content-Disposition"):
        parse(f"--{B}\r\n\r\n1\r\n--{B}--\r\n".encode())


@pytest.mark.parametrize("disposition, filename", [
    ("name=\"file\"; filename*=UTF-8''caf%C3%A9%20take%202.wav", "caf\u00e9 take 2.wav"),
    ("name=\"file\"; filename*=iso-8859-1'en'caf%E9.wav", "caf\u00e9.wav"),
    ("name=\"file\"; filename=\"plain.wav\"; filename*=UTF-8''other.wav", "plain.wav"),
])
def test_an_rfc_5987_filename_makes_a_file_too(disposition, filename):
    """RFC 7578 asks senders not to use filename*, but older urllib3 and some HTTP libraries
    send a non-ASCII name so alone; the plain filename wins where both are given."""
    body = f"--{B}\r\nContent-Disposition: form-data; {disposition}\r\n\r\nRIFF\r\n--{B}--\r\n".encode()
    assert parse(body).files["file"].filename == filename


@pytest.mark.parametrize("head", [b"Content-Type: text/plain", b"Content-Disposition: attachment; name=\"x\"",
                                  b"Content-Disposition: form-data", b"no colon here", b"\xff\xfe: x"])
def test_a_part_without_a_named_form_data_disposition_is_refused(head):
    with pytest.raises(MultipartError):
        parse(f"--{B}\r\n".encode() + head + b"\r\n\r\n1\r\n" + f"--{B}--".encode())


def test_a_field_that_is_not_utf8_is_refused_naming_it():
    with pytest.raises(MultipartError) as caught:
        parse(form(("language", b"\xff\xfe", None)))
    assert caught.value.param == "language"
