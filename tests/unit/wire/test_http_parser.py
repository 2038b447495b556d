"""The HTTP/1.1 parser and response writer, on bytes alone."""

from __future__ import annotations

import string
from urllib.parse import quote, urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localserve.wire.http import (
    CONTINUE_RESPONSE,
    LAST_CHUNK,
    REASONS,
    Limits,
    ProtocolError,
    Request,
    RequestReader,
    format_chunk,
    format_head,
    format_response,
)
from localserve.wire.http_body import MAX_CHUNK_SIZE_LINE, ChunkedReader
from localserve.wire.http_head import MAX_LEADING_EMPTY_LINES

DEFAULT = Limits()
SMALL = Limits(max_request_line=64, max_header_bytes=256, max_header_count=4, max_body_bytes=16)


def parse(data: bytes, limits: Limits = DEFAULT) -> Request:
    reader = RequestReader(limits)
    reader.feed(data)
    request = reader.next_request()
    assert request is not None, "parser wanted more bytes"
    return request


def status_of(data: bytes, limits: Limits = DEFAULT) -> int | None:
    """The status of the ProtocolError that data raises, None if it raises nothing."""
    reader = RequestReader(limits)
    reader.feed(data)
    try:
        while reader.next_request() is not None:
            pass
    except ProtocolError as error:
        return error.status
    return None


def get(extra: bytes = b"", target: bytes = b"/", version: bytes = b"HTTP/1.1") -> bytes:
    return b"GET " + target + b" " + version + b"\r\nHost: x\r\n" + extra + b"\r\n"


def post(body: bytes, extra: bytes = b"") -> bytes:
    length = b"Content-Length: %d\r\n" % len(body)
    return b"POST /p HTTP/1.1\r\nHost: x\r\n" + length + extra + b"\r\n" + body


def chunked(chunks: bytes, extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    head = b"POST /p " + version + b"\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    return head + extra + b"\r\n" + chunks


# --- Request line -----------------------------------------------------------------------------
def test_simple_get() -> None:
    request = parse(b"GET /v1/models?x=1&y=%20z HTTP/1.1\r\nHost: localhost:8080\r\n\r\n")
    assert request == Request(
        method="GET",
        target="/v1/models?x=1&y=%20z",
        path="/v1/models",
        query={"x": "1", "y": " z"},
        version="HTTP/1.1",
        headers=[("host", "localhost:8080")],
        body=b"",
    )


def test_path_is_kept_as_sent_query_decoded_and_last_query_value_wins() -> None:
    request = parse(get(target=b"/a%20b/%C3%A9/v1%2Fchat?k=1&k=2&empty=&q=%2F"))
    assert request.path == "/a%20b/%C3%A9/v1%2Fchat"    # routes decode their own parameters
    assert request.query == {"k": "2", "empty": "", "q": "/"}
    assert parse(get(target=b"http://localhost/v1%2Fmodels?a=%20")).path == "/v1%2Fmodels"


def test_absolute_form_and_asterisk_targets() -> None:
    request = parse(get(target=b"http://localhost:8080/v1/models?a=b"))
    assert (request.path, request.query) == ("/v1/models", {"a": "b"})
    assert parse(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").path == "*"


@pytest.mark.parametrize("target", [b"localhost:443", b"v1/models", b"http://[::1/"])
def test_other_target_forms_are_400(target: bytes) -> None:
    assert status_of(get(target=target)) == 400


def test_http_1_0_is_accepted_without_host() -> None:
    request = parse(b"GET / HTTP/1.0\r\n\r\n")
    assert (request.version, request.headers) == ("HTTP/1.0", [])


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/1.2", b"HTTP/0.9", b"HTTP/3.0"])
def test_well_formed_unsupported_version_is_505(version: bytes) -> None:
    assert status_of(get(version=version)) == 505


@pytest.mark.parametrize(
    "line",
    [
        b"GET /",
        b"GET  / HTTP/1.1",
        b"GET / HTTP/1.1 ",
        b" GET / HTTP/1.1",
        b"GET / http/1.1",
        b"GET / HTTP/1.10",
        b"GET / HTTP/2",
        b"G(T / HTTP/1.1",
        b"GET /\xc3\xa9 HTTP/1.1",
        b"GET /a\tb HTTP/1.1",
        b"GET\t/ HTTP/1.1",
        b"\x16\x03\x01\x02\x00",
    ],
)
def test_malformed_request_line_is_400(line: bytes) -> None:
    assert status_of(line + b"\r\nHost: x\r\n\r\n") == 400


def test_method_is_any_token_and_case_sensitive() -> None:
    assert parse(b"get / HTTP/1.1\r\nHost: x\r\n\r\n").method == "get"
    assert parse(b"M-SEARCH! / HTTP/1.1\r\nHost: x\r\n\r\n").method == "M-SEARCH!"


def test_a_few_leading_empty_lines_are_skipped() -> None:
    assert parse(b"\r\n" * MAX_LEADING_EMPTY_LINES + get()).method == "GET"
    assert status_of(b"\r\n" * (MAX_LEADING_EMPTY_LINES + 1) + get()) == 400


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\n",
        b"GET / HTTP/1.1\n\n",
        b"\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_bare_lf_is_rejected_everywhere_in_the_head(data: bytes) -> None:
    assert status_of(data) == 400


def test_bare_lf_is_rejected_in_chunked_framing() -> None:
    assert status_of(chunked(b"5\nhello\r\n0\r\n\r\n")) == 400
    assert status_of(chunked(b"5\r\nhello\r\n0\r\n\n")) == 400


def test_bare_cr_in_a_header_value_is_400() -> None:
    assert status_of(get(b"X-A: a\rb\r\n")) == 400


# --- Limits on the head -----------------------------------------------------------------------
def test_request_line_at_the_limit_is_accepted() -> None:
    line = b"GET /" + b"a" * (SMALL.max_request_line - len(b"GET / HTTP/1.1")) + b" HTTP/1.1"
    assert len(line) == SMALL.max_request_line
    assert parse(line + b"\r\nHost: x\r\n\r\n", SMALL).method == "GET"


def test_long_request_line_is_431_before_crlf_arrives() -> None:
    reader = RequestReader(SMALL)
    reader.feed(b"GET /" + b"a" * (SMALL.max_request_line - 5))
    assert reader.next_request() is None
    reader.feed(b"aaa")
    with pytest.raises(ProtocolError) as info:
        reader.next_request()
    assert info.value.status == 431


def test_long_request_line_is_431_with_crlf() -> None:
    line = b"GET /" + b"a" * SMALL.max_request_line + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    assert status_of(line, SMALL) == 431


def test_large_head_is_431_before_the_blank_line_arrives() -> None:
    data = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * SMALL.max_header_bytes
    assert status_of(data, SMALL) == 431


def test_head_exactly_at_max_header_bytes_is_accepted() -> None:
    base = get(b"X-Pad: \r\n")
    pad = b"a" * (SMALL.max_header_bytes - len(base))
    data = get(b"X-Pad: " + pad + b"\r\n")
    assert len(data) == SMALL.max_header_bytes
    assert parse(data, SMALL).header("x-pad") == pad.decode()
    assert status_of(get(b"X-Pad: " + pad + b"a\r\n"), SMALL) == 431


def test_header_count_limit_is_431() -> None:
    fields = b"".join(b"X-%d: v\r\n" % i for i in range(SMALL.max_header_count - 1))
    assert len(parse(get(fields), SMALL).headers) == SMALL.max_header_count
    assert status_of(get(fields + b"X-Last: v\r\n"), SMALL) == 431


# --- Header fields ----------------------------------------------------------------------------
def test_header_names_lowered_values_stripped_order_kept() -> None:
    request = parse(get(b"X-A:  one \t\r\nx-b:\ttwo\r\nX-A: three\r\nEmpty:\r\n"))
    assert request.headers == [
        ("host", "x"),
        ("x-a", "one"),
        ("x-b", "two"),
        ("x-a", "three"),
        ("empty", ""),
    ]
    assert request.header("X-A") == "one, three"
    assert request.header("missing") is None
    assert request.header("missing", "d") == "d"


def test_tab_and_obs_text_inside_values_are_kept() -> None:
    assert parse(get(b"X-A: a\tb \xe9\r\n")).header("x-a") == "a\tb \u00e9"


def test_whitespace_between_name_and_colon_is_400() -> None:
    assert status_of(get(b"X-A : v\r\n")) == 400
    assert status_of(get(b"X-A\t: v\r\n")) == 400


def test_obs_fold_is_400() -> None:
    assert status_of(get(b"X-A: one\r\n two\r\n")) == 400
    assert status_of(get(b"X-A: one\r\n\ttwo\r\n")) == 400


@pytest.mark.parametrize("char", [b"\x00", b"\x01", b"\x1f", b"\x7f", b"\r"])
def test_control_characters_in_values_are_400(char: bytes) -> None:
    assert status_of(get(b"X-A: a" + char + b"b\r\n")) == 400


@pytest.mark.parametrize("line", [b"X-A v", b": v", b"X(A): v", b"X\xe9: v"])
def test_missing_colon_or_bad_name_is_400(line: bytes) -> None:
    assert status_of(get(line + b"\r\n")) == 400


def test_http_1_1_needs_exactly_one_host() -> None:
    assert status_of(b"GET / HTTP/1.1\r\n\r\n") == 400
    assert status_of(get(b"Host: y\r\n")) == 400
    assert parse(b"GET / HTTP/1.1\r\nHost:\r\n\r\n").header("host") == ""


@pytest.mark.parametrize("host", [b"localhost:99999999999999999999", b"localhost:65536", b"[::1]:65536",
                                  b"[::1::2]:80", b"[1.2.3.4]", b"localhost:8080:1"])
def test_a_host_that_is_no_host_port_is_400_on_either_version(host: bytes) -> None:
    for version in (b"HTTP/1.1", b"HTTP/1.0"):
        assert status_of(b"GET / " + version + b"\r\nHost: " + host + b"\r\n\r\n") == 400
    assert status_of(get(target=b"http://" + host + b"/v1/models")) == 400


@pytest.mark.parametrize("host", [b"localhost:65535", b"localhost:0", b"[::1]:8080", b"[::ffff:127.0.0.1]",
                                  b"localhost:", b"example.com:00443"])
def test_every_port_and_ipv6_literal_is_a_host(host: bytes) -> None:
    assert parse(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n").host == host.decode()
    assert parse(get(target=b"http://" + host + b"/v1/models")).host == host.decode()


# --- Body framing -----------------------------------------------------------------------------
def test_content_length_body() -> None:
    assert parse(post(b"hello")).body == b"hello"
    assert parse(post(b"")).body == b""


def test_identical_content_length_duplicates_are_allowed() -> None:
    data = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\nhello"
    assert parse(data).body == b"hello"


@pytest.mark.parametrize(
    "fields",
    [
        b"Content-Length: 5, 6\r\n",
        b"Content-Length: 5\r\nContent-Length: 6\r\n",
        b"Content-Length: -5\r\n",
        b"Content-Length: +5\r\n",
        b"Content-Length: 0x5\r\n",
        b"Content-Length: 5 5\r\n",
        b"Content-Length: 5,\r\n",
        b"Content-Length:\r\n",
        b"Content-Length: \xd9\xa5\r\n",  # a non-ASCII digit
    ],
)
def test_bad_content_length_is_400(fields: bytes) -> None:
    assert status_of(b"POST / HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\nhello") == 400


def test_content_length_leading_zeros() -> None:
    data = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0005\r\n\r\nhello"
    assert parse(data).body == b"hello"


def test_oversized_content_length_is_413_as_soon_as_the_head_is_parsed() -> None:
    reader = RequestReader(SMALL)
    reader.feed(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n")
    with pytest.raises(ProtocolError) as info:
        reader.next_request()
    assert info.value.status == 413


def test_absurd_content_length_is_413_not_a_crash() -> None:
    data = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n"
    assert status_of(data) == 413


def test_chunked_body() -> None:
    body = chunked(b"5\r\nhello\r\nA\r\n, world!!!\r\n0\r\n\r\n")
    assert parse(body).body == b"hello, world!!!"


def test_chunked_is_case_insensitive_and_list_may_have_empty_elements() -> None:
    assert parse(chunked(b"0\r\n\r\n")).body == b""
    data = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: , Chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"
    assert parse(data).body == b"a"


def test_chunk_extensions_and_trailers_are_ignored() -> None:
    data = chunked(b'5;name=value;q="x y"\r\nhello\r\n0;last\r\nX-Trailer: t\r\nX-Two: 2\r\n\r\n')
    request = parse(data)
    assert request.body == b"hello"
    assert request.header("x-trailer") is None


def test_chunk_data_must_be_followed_by_crlf() -> None:
    assert status_of(chunked(b"5\r\nhelloXY0\r\n\r\n")) == 400


@pytest.mark.parametrize("size_line", [b"g", b"", b"-1", b" 5", b"5 x", b"0x5", b"1" * 17])
def test_bad_chunk_size_is_400(size_line: bytes) -> None:
    assert status_of(chunked(size_line + b"\r\nhello\r\n0\r\n\r\n")) == 400


def test_absurdly_long_chunk_size_line_is_400_before_crlf() -> None:
    reader = RequestReader()
    reader.feed(chunked(b"5;" + b"x" * MAX_CHUNK_SIZE_LINE))
    with pytest.raises(ProtocolError) as info:
        reader.next_request()
    assert info.value.status == 400


def test_bad_trailer_is_400() -> None:
    assert status_of(chunked(b"0\r\nBad Trailer\r\n\r\n")) == 400


def test_chunked_total_over_max_body_is_413() -> None:
    assert parse(chunked(b"8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n"), SMALL).body
    assert status_of(chunked(b"8\r\n12345678\r\n9\r\n"), SMALL) == 413
    assert status_of(chunked(b"ffffffffffffffff\r\n")) == 413


def test_content_length_and_transfer_encoding_together_is_400() -> None:
    assert status_of(chunked(b"0\r\n\r\n", b"Content-Length: 5\r\n")) == 400


def test_transfer_encoding_on_http_1_0_is_400() -> None:
    assert status_of(chunked(b"0\r\n\r\n", version=b"HTTP/1.0")) == 400


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"gzip\r\nTransfer-Encoding: chunked"])
def test_other_transfer_codings_before_chunked_are_501(coding: bytes) -> None:
    data = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + coding + b"\r\n\r\n0\r\n\r\n"
    assert status_of(data) == 501


@pytest.mark.parametrize(
    "coding", [b"gzip", b"chunked, gzip", b"chunked, chunked", b"", b"identity"]
)
def test_chunked_not_final_is_400(coding: bytes) -> None:
    data = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + coding + b"\r\n\r\n0\r\n\r\n"
    assert status_of(data) == 400


def test_no_framing_means_no_body_and_the_rest_is_the_next_request() -> None:
    reader = RequestReader()
    reader.feed(get() + b"hello")
    first = reader.next_request()
    assert first is not None and first.body == b""
    assert reader.next_request() is None
    assert reader.has_partial


# --- Pipelining, splits, state ----------------------------------------------------------------
def drain(reader: RequestReader) -> list[Request]:
    requests = []
    while (request := reader.next_request()) is not None:
        requests.append(request)
    return requests


def test_two_pipelined_requests_in_one_feed() -> None:
    reader = RequestReader()
    reader.feed(post(b"one") + get(target=b"/two"))
    assert [(r.path, r.body) for r in drain(reader)] == [("/p", b"one"), ("/two", b"")]
    assert not reader.has_partial


def test_three_pipelined_requests_in_one_feed_with_stray_crlf_between() -> None:
    reader = RequestReader()
    reader.feed(post(b"a") + b"\r\n" + chunked(b"1\r\nb\r\n0\r\n\r\n") + get(target=b"/c"))
    assert [r.body for r in drain(reader)] == [b"a", b"b", b""]
    assert [r.method for r in drain(reader)] == []


@pytest.mark.parametrize(
    "data",
    [
        post(b"hello world", b"X-A: 1\r\n"),
        chunked(b"5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nT: 1\r\n\r\n"),
        get(b"Connection: close\r\n"),
    ],
)
def test_byte_by_byte_feeding_gives_the_same_request(data: bytes) -> None:
    reader = RequestReader()
    requests = []
    for i in range(len(data)):
        reader.feed(data[i : i + 1])
        requests += drain(reader)
    assert requests == [parse(data)]


def test_has_partial_and_head_complete() -> None:
    reader = RequestReader()
    assert not reader.has_partial and not reader.head_complete()
    reader.feed(b"POST / HT")
    assert reader.next_request() is None
    assert reader.has_partial and not reader.head_complete()
    reader.feed(b"TP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
    assert reader.next_request() is None
    assert reader.has_partial and reader.head_complete()
    reader.feed(b"ok")
    assert reader.next_request() is not None
    assert not reader.has_partial and not reader.head_complete()


def test_errors_are_sticky() -> None:
    reader = RequestReader()
    reader.feed(b"BAD LINE\r\n\r\n")
    for _ in range(2):
        with pytest.raises(ProtocolError) as info:
            reader.next_request()
        assert info.value.status == 400
    assert info.value.message == str(info.value)


# --- Expect: 100-continue ---------------------------------------------------------------------
def test_wants_continue_until_marked() -> None:
    reader = RequestReader()
    reader.feed(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n")
    assert not reader.wants_continue()  # head not parsed yet: next_request() not called
    assert reader.next_request() is None
    assert reader.wants_continue()
    reader.mark_continue_sent()
    assert not reader.wants_continue()
    reader.feed(b"ok" + b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n")
    reader.feed(b"Content-Length: 1\r\n\r\n")
    assert reader.next_request() is not None
    assert not reader.wants_continue()
    assert reader.next_request() is None
    assert reader.wants_continue()  # the mark was for the previous request


def test_no_continue_without_expect_or_on_http_1_0_or_once_complete() -> None:
    for data in [
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
    ]:
        reader = RequestReader()
        reader.feed(data)
        assert reader.next_request() is None
        assert not reader.wants_continue()
    reader = RequestReader()
    reader.feed(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n")
    reader.feed(b"Content-Length: 2\r\n\r\nok")
    assert reader.next_request() is not None
    assert not reader.wants_continue()


# --- keep-alive -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "connection", "expected"),
    [
        (b"HTTP/1.1", None, True),
        (b"HTTP/1.1", b"close", False),
        (b"HTTP/1.1", b"Keep-Alive, Close", False),
        (b"HTTP/1.1", b"keep-alive", True),
        (b"HTTP/1.0", None, False),
        (b"HTTP/1.0", b"Keep-Alive", True),
        (b"HTTP/1.0", b"close", False),
        (b"HTTP/1.0", b"upgrade", False),
    ],
)
def test_keep_alive(version: bytes, connection: bytes | None, expected: bool) -> None:
    extra = b"" if connection is None else b"Connection: " + connection + b"\r\n"
    assert parse(get(extra, version=version)).keep_alive is expected



@pytest.mark.parametrize(
    ("upgrade", "expected"),
    [(None, False), (b"websocket", True), (b"WebSocket", True), (b"h2c, websocket", True), (b"h2c", False),
     (b"websockets", False)],
)
def test_asks_for_websocket(upgrade: bytes | None, expected: bool) -> None:
    extra = b"" if upgrade is None else b"Connection: Upgrade\r\nUpgrade: " + upgrade + b"\r\n"
    assert parse(get(extra)).asks_for_websocket is expected

# --- Responses --------------------------------------------------------------------------------
def test_format_response() -> None:
    out = format_response(200, [("Content-Type", "application/json")], b'{"a":1}')
    assert out == (
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
    )


def test_format_response_head_only_keeps_the_length() -> None:
    out = format_response(200, [], b"hello", head_only=True)
    assert out == b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"


def test_format_response_without_body_sends_length_zero_except_204() -> None:
    assert format_response(404, []) == b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    assert format_response(204, [("X", "y")]) == b"HTTP/1.1 204 No Content\r\nX: y\r\n\r\n"
    with pytest.raises(ValueError):
        format_response(204, [], b"body")


def test_format_response_refuses_a_second_content_length_and_header_injection() -> None:
    with pytest.raises(ValueError):
        format_response(200, [("content-length", "3")], b"abc")
    with pytest.raises(ValueError):
        format_response(200, [("X-A", "a\r\nSet-Cookie: evil")])
    with pytest.raises(ValueError):
        format_head(200, [("Bad Name", "v")])


def test_format_head_adds_nothing() -> None:
    out = format_head(200, [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")])
    assert out == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
    )
    assert format_head(529, []) == b"HTTP/1.1 529 Overloaded\r\n\r\n"
    assert format_head(599, []) == b"HTTP/1.1 599 \r\n\r\n"


def test_format_chunk_and_constants() -> None:
    assert format_chunk(b"hello") == b"5\r\nhello\r\n"
    assert format_chunk(b"x" * 26) == b"1A\r\n" + b"x" * 26 + b"\r\n"
    assert format_chunk(b"") == b""
    assert LAST_CHUNK == b"0\r\n\r\n"
    assert CONTINUE_RESPONSE == b"HTTP/1.1 100 Continue\r\n\r\n"


def test_format_chunk_round_trips_through_the_chunked_reader() -> None:
    buf = bytearray(format_chunk(b"ab") + format_chunk(b"") + format_chunk(b"c" * 300) + LAST_CHUNK)
    assert ChunkedReader(Limits()).read(buf) == b"ab" + b"c" * 300
    assert buf == b""


def test_reasons_cover_the_statuses_we_send() -> None:
    needed = [100, 200, 201, 204, 400, 401, 403, 404, 405, 408, 411, 413, 415, 429, 431]
    assert all(REASONS[code] for code in needed + [500, 501, 503, 505])
    assert REASONS[529] == "Overloaded"


# --- Properties -------------------------------------------------------------------------------
PARSER_STATUSES = {400, 413, 431, 501, 505}
FRAGMENTS = [
    b"GET / HTTP/1.1\r\n", b"POST /x?a=b HTTP/1.0\r\n", b"Host: x\r\n", b"\r\n", b"\n", b"\r",
    b"Content-Length: 3\r\n", b"Content-Length: 99999999999999999999\r\n",
    b"Transfer-Encoding: chunked\r\n", b"Transfer-Encoding: gzip\r\n", b"5\r\nhello\r\n",
    b"0\r\n\r\n", b"ffffffffffffffff\r\n", b"3;x\r\n", b"HTTP/2.0", b" ", b":", b"\x00", b"\t",
    b"Expect: 100-continue\r\n", b"Connection: close\r\n", b"*", b"http://[", b"%", b"\xff",
]  # fmt: skip
junk = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=12)), max_size=40)
limits_choice = st.sampled_from([Limits(), SMALL])


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@settings(max_examples=200, deadline=None)
@given(junk.map(b"".join), st.lists(st.integers(min_value=0), max_size=8), limits_choice)
def test_arbitrary_bytes_raise_only_protocol_errors(
    data: bytes, cuts: list[int], limits: Limits
) -> None:
    reader = RequestReader(limits)
    try:
        for piece in split_at(data, cuts):
            reader.feed(piece)
            drain(reader)
            reader.wants_continue(), reader.has_partial, reader.head_complete()
    except ProtocolError as error:
        assert error.status in PARSER_STATUSES


TOKEN_CHARS = "!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits
tokens = st.text(TOKEN_CHARS, min_size=1, max_size=12)
field_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=20
).map(lambda s: s.strip(" \t"))
ows = st.sampled_from(["", " ", "\t", "  ", " \t "])
any_text = st.text(st.characters(codec="utf-8"), max_size=8)
FRAMING = {"host", "content-length", "transfer-encoding"}
# a Host value is uri-host [":" port] (RFC 9110 §7.2): a reg-name or an IP literal, digits for a port
host_values = st.tuples(
    st.text(string.ascii_letters + string.digits + "-._~!$&'()*+,;=", max_size=12)
    | st.sampled_from(["[::1]", "127.0.0.1", "%41b"]),
    st.sampled_from(["", ":", ":8080", ":0"]),
).map("".join)


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[bytes, Request]:
    """Wire bytes of a random valid request, and the Request they must parse to."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]) | tokens)
    segments = draw(st.lists(any_text.filter(lambda s: "/" not in s), max_size=4))
    query = draw(st.dictionaries(any_text.filter(bool), any_text, max_size=3))
    target = "/" + "/".join(quote(s, safe="") for s in segments)
    if query:
        target += "?" + urlencode(query)
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0"]))
    names = tokens.filter(lambda n: n.lower() not in FRAMING)
    headers = draw(st.lists(st.tuples(names, field_text)))
    if version == "HTTP/1.1":
        headers.insert(draw(st.integers(0, len(headers))), ("Host", draw(host_values)))
    body = draw(st.binary(max_size=200))
    framing = draw(st.sampled_from(["length", "chunked"] if version == "HTTP/1.1" else ["length"]))
    if framing == "length":
        headers.append(("Content-Length", str(len(body))))
        wire_body = body
    else:
        headers.append(("Transfer-Encoding", "chunked"))
        cuts = draw(st.lists(st.integers(0, len(body)), max_size=5))
        pieces = [p for p in split_at(body, cuts) if p]
        wire_body = b"".join(draw(chunk_encoding(piece)) for piece in pieces)
        wire_body += b"0" + draw(st.sampled_from([b"", b";end"])) + b"\r\n"
        wire_body += draw(st.sampled_from([b"", b"X-Trailer: 1\r\n"])) + b"\r\n"
    lines = [f"{method} {target} {version}".encode()]
    lines += [f"{n}:{draw(ows)}{v}{draw(ows)}".encode("latin-1") for n, v in headers]
    wire = b"\r\n".join(lines) + b"\r\n\r\n" + wire_body
    expected = Request(
        method=method,
        target=target,
        path=target.partition("?")[0],
        query=query,
        version=version,
        headers=[(n.lower(), v) for n, v in headers],
        body=body,
    )
    return wire, expected


@st.composite
def chunk_encoding(draw: st.DrawFn, piece: bytes) -> bytes:
    size = draw(st.sampled_from(["%x", "%X", "%04x"])) % len(piece)
    extension = draw(st.sampled_from(["", ";a=b", " ;name"]))
    return f"{size}{extension}\r\n".encode() + piece + b"\r\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(valid_requests(), min_size=1, max_size=3), st.lists(st.integers(min_value=0)))
def test_valid_requests_parse_the_same_however_split(
    requests: list[tuple[bytes, Request]], cuts: list[int]
) -> None:
    wire = b"".join(w for w, _ in requests)
    expected = [r for _, r in requests]
    whole = RequestReader()
    whole.feed(wire)
    assert drain(whole) == expected
    reader = RequestReader()
    parsed: list[Request] = []
    for piece in split_at(wire, cuts):
        reader.feed(piece)
        parsed += drain(reader)
    assert parsed == expected
    assert not reader.has_partial


@pytest.mark.parametrize(
    "data",
    [b"GET / HTTP/1.1\r\nHost: x\n\r\n", chunked(b"5;x\nhello\r\n"), chunked(b"0\r\nT: 1\n\r\n")],
)
def test_bare_lf_is_found_when_fed_byte_by_byte(data: bytes) -> None:
    reader = RequestReader()
    with pytest.raises(ProtocolError) as info:
        for i in range(len(data)):
            reader.feed(data[i : i + 1])
            drain(reader)
    assert info.value.status == 400
