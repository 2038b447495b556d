"""The built-in page at /: served with the right headers, and used in a real headless Chromium.

The server is the real one on a random-weight model a few MB large (about 160 tokens a second
on one thread here: a long answer streams for seconds, time to stop it or look at the status
view). Where a test needs particular text (HTML tags, reasoning, a tool call), the page's
"extra request fields" box carries a GBNF grammar or a logit bias, as a user could type it.
Each browser test leaves a screenshot in test-output/webui/ for a person to look at.
"""

from __future__ import annotations

import json
import time

import pytest

from browser import Browser
from clients import openai_sdk
from conftest import ROOT, ServerProcess, slow_model
from promtext import parse
from rawhttp import RawConnection, post_json, request
from tinymodel import CHATML_TEMPLATE, FIM_TOKENS, NO_EOG, token_ids, write_tiny_gguf

SHOTS = ROOT / "test-output" / "webui"
MODEL_ID = "page-model"
API_KEY = "page-test-key"
SCRIPTS = ("app", "dom", "api", "messages", "chat", "status")
PAGE_FILES = {"/": "text/html", "/webui/style.css": "text/css", "/webui/favicon.svg": "image/svg+xml",
              **{f"/webui/{name}.js": "text/javascript" for name in SCRIPTS}}
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "The time in a zone",
                                           "parameters": {"type": "object",
                                                          "properties": {"zone": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def page_model(models_dir):
    """ChatML with <think> and <tool_call> as single tokens; big enough to stream for seconds."""
    path = models_dir / "page.gguf"
    if not path.exists():
        write_tiny_gguf(path, chat_template=CHATML_TEMPLATE, n_embd=256, n_layer=4, n_head=4, n_ff=512,
                        context_length=8192,
                        special_tokens=["<tool_call>", "</tool_call>",
                                        ("<think>", "user_defined"), ("</think>", "user_defined")])
    return path


@pytest.fixture(scope="module")
def webui_server(page_model):
    srv = ServerProcess(page_model, "--model-id", MODEL_ID, "--ctx-size", "8192", "--slots", "2",
                        "--tool-syntax", "hermes", "--no-store")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def key_server(page_model):
    srv = ServerProcess(page_model, "--model-id", MODEL_ID, "--slots", "1", "--max-queue", "1", "--no-store",
                        "--api-key", API_KEY)
    yield srv
    srv.stop()


# what a browser asks for: GET / without text/html is Ollama's probe ("Ollama is running")
BROWSER_ACCEPT = "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n"


def get(port: int, path: str, headers: str = "") -> object:
    return request(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{BROWSER_ACCEPT}{headers}\r\n".encode())


def slots_busy(server) -> int:
    return sum(slot["busy"] for slot in get(server.port, "/slots").json()["slots"])


def generations(server, reason: str) -> float:
    return parse(get(server.port, "/metrics").body.decode()).value("localserve_generations_total",
                                                                    finish_reason=reason)


# ---- the files, over HTTP -------------------------------------------------------------------

@pytest.mark.parametrize("path", list(PAGE_FILES))
def test_page_files_carry_type_etag_cache_and_a_strict_csp(webui_server, path):
    resp = get(webui_server.port, path)
    assert resp.status == 200
    assert resp.header("content-type").startswith(PAGE_FILES[path])
    assert resp.header("etag").startswith('"') and resp.header("cache-control") == "no-cache"
    csp = resp.header("content-security-policy")
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert resp.header("x-content-type-options") == "nosniff"
    again = get(webui_server.port, path, f"If-None-Match: W/\"other\", {resp.header('etag')}\r\n")
    assert again.status == 304 and again.body == b"" and again.header("etag") == resp.header("etag")
    changed = get(webui_server.port, path, 'If-None-Match: "not-this-one"\r\n')
    assert changed.status == 200 and changed.body == resp.body
    head = request(webui_server.port, f"HEAD {path} HTTP/1.1\r\nHost: localhost\r\n{BROWSER_ACCEPT}\r\n".encode())
    assert head.status == 200 and head.body == b"" and head.header("content-length") == str(len(resp.body))


def test_the_page_loads_nothing_from_elsewhere(webui_server):
    html = get(webui_server.port, "/").body.decode()
    assert "http://" not in html and "https://" not in html and "<script>" not in html
    assert '<script type="module" src="/webui/app.js"></script>' in html
    for name in SCRIPTS:
        script = get(webui_server.port, f"/webui/{name}.js").body.decode()
        assert "http://" not in script and "https://" not in script
        assert "innerHTML" not in script and "outerHTML" not in script and "insertAdjacentHTML" not in script
        assert "eval(" not in script and "new Function" not in script


def test_the_page_is_public_under_api_key_and_the_api_is_not(key_server):
    for path in PAGE_FILES:
        assert get(key_server.port, path).status == 200, path
    assert get(key_server.port, "/v1/models").status == 401
    assert get(key_server.port, "/slots").status == 401
    assert get(key_server.port, "/metrics").status == 401
    assert get(key_server.port, "/v1/models", f"Authorization: Bearer {API_KEY}\r\n").status == 200


def test_the_host_check_covers_the_page(webui_server):
    resp = request(webui_server.port, b"GET / HTTP/1.1\r\nHost: attacker.example\r\n\r\n")
    assert resp.status == 403 and b"<html" not in resp.body


@pytest.mark.parametrize("how", ["flag", "env", "config"])
def test_no_webui_turns_the_page_off(page_model, how, tmp_path):
    config = tmp_path / "localserve.toml"
    config.write_text("no-webui = true\n")
    args, env = {"flag": (["--no-webui"], None), "env": ([], {"LOCALSERVE_NO_WEBUI": "1"}),
                 "config": (["--config", str(config)], None)}[how]
    srv = ServerProcess(page_model, "--no-store", *args, env=env)
    try:
        for path in PAGE_FILES:
            assert get(srv.port, path).status == 404, path
        assert get(srv.port, "/health").status == 200
    finally:
        srv.stop()


# ---- in the browser ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser(chromium):
    yield chromium.lend(SHOTS)
    chromium.park()


@pytest.fixture
def page(browser, webui_server, request):
    """The page, freshly loaded with empty storage, the model list filled in; a screenshot after."""
    browser.driver.set_window_size(1200, 800)
    browser.open(webui_server.base_url + "/")
    wait_for_models(browser)
    yield browser
    browser.screenshot(request.node.name)


def wait_for_models(browser: Browser) -> None:
    browser.wait(lambda: browser.js("return document.getElementById('model').options.length") > 0,
                 "the model picker was never filled from /v1/models")


def set_field(browser: Browser, element_id: str, value: str) -> None:
    """A settings field, by script: typing JSON into a textarea key by key is slow and gains nothing."""
    browser.js("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
               "e.dispatchEvent(new Event('change', {bubbles: true}))", element_id, value)


def finished(browser: Browser) -> int:
    return int(browser.js("return document.getElementById('messages').dataset.finished || '0'"))


def send(browser: Browser, text: str) -> None:
    from selenium.webdriver.common.keys import Keys
    box = browser.el("#prompt")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def send_and_wait(browser: Browser, text: str, timeout: float = 60.0) -> None:
    before = finished(browser)
    send(browser, text)
    browser.wait(lambda: finished(browser) > before, "the answer never finished", timeout)


def last_answer(browser: Browser) -> str:
    return browser.text("#messages .message.assistant:last-child .content")


def wait_streaming(browser: Browser, chars: int = 20) -> None:
    browser.wait(lambda: len(last_answer(browser) or "") >= chars, "no text streamed in")


def test_page_loads_with_no_console_errors_and_no_request_outside_the_origin(page, webui_server):
    # the picker lists /v1/models: the one model, named with its state
    assert page.js("return [...document.querySelectorAll('#model option')].map(o => o.value)") == [MODEL_ID]
    assert page.text("#model option") == f"{MODEL_ID} (loaded)"
    send_and_wait(page, "hello")
    page.el("#tab-status").click()
    page.wait(lambda: page.text("#busy-slots") != "–", "the status view never filled")
    page.el("#tab-chat").click()
    assert page.console_errors() == []
    urls = page.requested_urls()
    assert urls and all(url.startswith(webui_server.base_url + "/") for url in urls), urls
    paths = {url[len(webui_server.base_url):] for url in urls}
    scripts_and_styles = set(PAGE_FILES) - {"/webui/favicon.svg"}    # the icon: once per profile, from its cache
    assert scripts_and_styles | {"/v1/models", "/v1/chat/completions", "/slots", "/metrics"} <= paths
    # the policy holds in the browser: an inline script added to the page does not run
    page.js("const s = document.createElement('script'); s.textContent = 'window.inlineRan = true';"
            "document.body.append(s)")
    assert page.js("return window.inlineRan === undefined")
    assert any("Content Security Policy" in line for line in page.console_errors())


def test_a_prompt_streams_in_and_shows_exactly_what_the_api_streamed(page, webui_server):
    from selenium.webdriver.common.keys import Keys
    set_field(page, "temperature", "0.9")
    set_field(page, "max-tokens", "300")
    set_field(page, "extra-fields", json.dumps({"seed": 4242, "logit_bias": NO_EOG}))
    # every length the answer had on screen, to see it grow token by token
    page.js("window.lengths = []; new MutationObserver(() => {"
            " const c = document.querySelector('#messages .message.assistant:last-child .content');"
            " if (c) window.lengths.push(c.textContent.length); })"
            ".observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true})")
    # what the API streamed to the page, read from a copy of the response's body: the page must show
    # exactly that (a second request for the same seed need not write the same text: it starts from
    # the first one's cached prompt, and not every CPU's kernels give a row the same bits in a batch
    # of another shape)
    page.js("window.streamed = ''; const fetched = window.fetch; window.fetch = async (...args) => {"
            " const r = await fetched(...args);"
            " if (!String(args[0]).includes('/v1/chat/completions') || !r.body) return r;"
            " const [mine, copy] = r.body.tee(); const reader = copy.getReader(); const text = new TextDecoder();"
            " (async () => { let rest = ''; for (;;) { const {done, value} = await reader.read(); if (done) break;"
            "  rest += text.decode(value, {stream: true}); const lines = rest.split('\\n'); rest = lines.pop();"
            "  for (const line of lines) { if (!line.startsWith('data: {')) continue;"
            "   const chunk = JSON.parse(line.slice(6)); const c = chunk.choices && chunk.choices[0];"
            "   if (c && c.delta && c.delta.content) window.streamed += c.delta.content; } } })();"
            " return new Response(mine, {status: r.status, statusText: r.statusText, headers: r.headers}); }")
    before = finished(page)
    box = page.el("#prompt")
    box.send_keys("line one")
    box.send_keys(Keys.SHIFT, Keys.ENTER)      # Shift+Enter: a new line, not a send
    box.send_keys("line two")
    assert finished(page) == before and page.all("#messages .message.user") == []
    box.send_keys(Keys.ENTER)
    page.wait(lambda: finished(page) > before, "the answer never finished", 60)
    assert page.text("#messages .message.user .content") == "line one\nline two"
    shown = last_answer(page)
    lengths = page.js("return window.lengths")
    assert len({n for n in lengths if 0 < n < len(shown)}) >= 3, "the answer did not stream in"

    streamed = page.js("return window.streamed")
    assert len(streamed) > 0 and shown == streamed
    assert "300 completion tokens" in page.text("#messages .message.assistant:last-child .meta")
    assert "tokens/s" in page.text("#messages .message.assistant:last-child .meta")


def test_stop_mid_stream_cancels_the_job(page, webui_server):
    cancelled, length = generations(webui_server, "cancelled"), generations(webui_server, "length")
    set_field(page, "max-tokens", "8000")
    set_field(page, "extra-fields", json.dumps({"logit_bias": NO_EOG}))
    send(page, "count to eight thousand")
    wait_streaming(page)
    assert slots_busy(webui_server) == 1
    page.el("#stop").click()
    stopped = time.monotonic()
    page.wait(lambda: slots_busy(webui_server) == 0, "the slot stayed busy after Stop", timeout=10)
    freed = time.monotonic() - stopped
    assert generations(webui_server, "cancelled") == cancelled + 1, f"slot freed after {freed:.2f}s"
    assert generations(webui_server, "length") == length
    assert "stopped" in page.text("#messages .message.assistant:last-child .meta")
    assert page.el("#send").is_displayed() and not page.el("#stop").is_displayed()
    print(f"slot free {freed:.3f}s after Stop")


def test_model_html_is_shown_as_text_and_runs_nothing(page):
    forced = ('Look: <img src=x onerror="window.pwned=1"> <script>window.pwned=2</script>'
              '<b onclick="window.pwned=3">bold</b>\n```html\n<script>window.pwned=4</script>\n```')
    grammar = "root ::= " + json.dumps(forced)
    set_field(page, "extra-fields", json.dumps({"grammar": grammar}))
    set_field(page, "max-tokens", "400")
    send_and_wait(page, "show me some html")
    content = "#messages .message.assistant:last-child .content"
    # the text shown is the model's characters: tags and all, the fenced block in <pre><code>
    assert page.text(content) == forced.replace("```html\n", "").replace("\n```", "")
    assert page.text(content + " pre code") == "<script>window.pwned=4</script>"
    assert page.js("return document.querySelectorAll('#messages img, #messages script, #messages b').length") == 0
    assert page.js("return window.pwned === undefined")
    assert page.js("return document.title") == "localserve"


def test_reasoning_is_collapsed_and_tool_calls_show_as_calls(page):
    call = '{"name": "get_time", "arguments": {"zone": "UTC"}}'
    grammar = f'root ::= <think> "pondering the zone" </think> "Let me look." <tool_call> {json.dumps(call)} </tool_call>'
    set_field(page, "extra-fields", json.dumps({"grammar": grammar, "tools": TOOLS}))
    send_and_wait(page, "what time is it")
    last = "#messages .message.assistant:last-child"
    assert page.text(f"{last} .content") == "Let me look."
    assert page.text(f"{last} details.reasoning .text") == "pondering the zone"
    assert page.js(f"return document.querySelector('{last} details.reasoning').open") is False
    assert page.text(f"{last} .tool-call .name") == "get_time"
    assert json.loads(page.text(f"{last} .tool-call .arguments")) == {"zone": "UTC"}
    assert "finish: tool_calls" in page.text(f"{last} .meta")


def test_server_errors_show_as_readable_messages(page):
    set_field(page, "extra-fields", json.dumps({"top_k": "many"}))
    send_and_wait(page, "hi")
    error = page.text("#messages .message.assistant:last-child .error")
    assert error.startswith("400: ") and "top_k" in error
    set_field(page, "extra-fields", "")
    page.js("document.getElementById('prompt').value = arguments[0]", "hello world " * 4500)
    before = finished(page)
    page.el("#send").click()
    page.wait(lambda: finished(page) > before, "the answer never finished")
    error = page.text("#messages .message.assistant:last-child .error")
    assert error.startswith("400: ") and "context" in error, error
    set_field(page, "extra-fields", "{not json")
    page.el("#prompt").send_keys("hi")
    page.el("#send").click()
    assert "not valid JSON" in page.text("#notice") and page.el("#notice").is_displayed()
    assert page.js("return document.getElementById('prompt').value") == "hi"   # kept, to send again


def test_conversations_are_kept_with_new_and_delete(page):
    set_field(page, "max-tokens", "4")
    send_and_wait(page, "first question")
    page.el("#new-chat").click()
    send_and_wait(page, "second question")
    titles = [e.text for e in page.all("#conversations .open")]
    assert titles == ["second question", "first question"]
    page.reload()
    wait_for_models(page)
    assert [e.text for e in page.all("#conversations .open")] == titles
    assert page.text("#messages .message.user .content") == "second question"
    page.el("#conversations li.current .delete").click()
    assert [e.text for e in page.all("#conversations .open")] == ["first question"]
    assert page.text("#messages .message.user .content") == "first question"


def test_the_key_field_works_with_api_key(browser, key_server, request):
    browser.driver.set_window_size(1200, 800)
    browser.open(f"http://localhost:{key_server.port}/")     # a name, not an address: the Host check lets it by
    try:
        # the page's own files load without the key; its first API call says what is missing
        browser.wait(lambda: "API key" in (browser.text("#notice") or ""), "no notice about the key")
        assert browser.js("return getComputedStyle(document.querySelector('.bar')).display") == "flex"
        assert browser.el("#api-key").is_displayed()
        browser.el("#api-key").send_keys("not-the-key")
        browser.el("#save-key").click()
        browser.wait(lambda: "invalid or missing API key" in (browser.text("#notice") or ""),
                     "a wrong key was not reported")
        browser.el("#api-key").clear()
        browser.el("#api-key").send_keys(API_KEY)
        browser.el("#save-key").click()
        wait_for_models(browser)
        assert not browser.el("#notice").is_displayed()
        assert browser.js("return JSON.parse(localStorage.getItem('localserve.apiKey'))") == API_KEY
        set_field(browser, "max-tokens", "8")
        send_and_wait(browser, "hi")
        assert browser.text("#messages .message.assistant:last-child .error") is None
        assert "completion tokens" in browser.text("#messages .message.assistant:last-child .meta")
        browser.reload()      # the key stays in localStorage
        wait_for_models(browser)
        browser.el("#tab-status").click()
        browser.wait(lambda: browser.text("#busy-slots") == "0 / 1", "the status view did not load with the key")
    finally:
        browser.screenshot(request.node.name)


def test_a_full_queue_shows_as_a_readable_message(browser, key_server, request):
    auth = f"Authorization: Bearer {API_KEY}\r\n"
    long_stream = post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 8000, "stream": True, "logit_bias": NO_EOG},
                            headers=auth)
    browser.open(key_server.base_url + "/")
    browser.js("localStorage.setItem('localserve.apiKey', JSON.stringify(arguments[0]))", API_KEY)
    browser.reload()
    wait_for_models(browser)
    running, queued = RawConnection(key_server.port, timeout=60), RawConnection(key_server.port, timeout=60)
    try:
        running.send(long_stream)
        running.sock.recv(4096)                        # streaming: the only slot is busy
        queued.send(long_stream)                       # waits for it: the queue (size 1) is full
        browser.wait(lambda: get(key_server.port, "/slots", auth).json()["queue_depth"] == 1, "never queued")
        send_and_wait(browser, "is there room?")
        error = browser.text("#messages .message.assistant:last-child .error")
        assert error.startswith("503: ") and "busy" in error, error
    finally:
        browser.screenshot(request.node.name)
        running.close()
        queued.close()
    browser.wait(lambda: slots_busy_with_key(key_server, auth) == 0, "the dropped streams kept the slot")


def slots_busy_with_key(server, auth: str) -> int:
    return sum(slot["busy"] for slot in get(server.port, "/slots", auth).json()["slots"])


def test_status_view_shows_a_busy_slot_while_a_stream_runs(page, webui_server):
    from selenium.webdriver.common.keys import Keys
    set_field(page, "max-tokens", "8000")
    set_field(page, "extra-fields", json.dumps({"logit_bias": NO_EOG}))
    send(page, "keep going")
    wait_streaming(page)
    page.el("#tab-status").click()
    page.wait(lambda: page.text("#busy-slots") == "1 / 2", "the status view never showed the busy slot")
    # the busy slot says what its job is doing; the idle one says nothing more
    page.wait(lambda: [e.text for e in page.all("#slots-table td.busy")] == ["decoding"], "the job never decoded")
    busy, idle = sorted((row_texts(page, row) for row in page.all("#slots-table tbody tr")),
                        key=lambda cells: cells[1] == "idle")
    job = next(s["job"] for s in get(webui_server.port, "/slots").json()["slots"] if s["busy"])
    assert busy[0].startswith(f"{MODEL_ID} #") and busy[2] == job["request"] and busy[2].startswith("chat ")
    assert busy[3] == f"{job['prompt_tokens']} / {job['prompt_tokens']} (100 %)" and job["prompt_tokens"] > 0
    assert int(busy[4]) > 0
    assert idle[1:5] == ["idle", "–", "–", "–"]
    assert page.el("#no-parked").is_displayed() and not page.el("#parked-table").is_displayed()
    assert page.text("#models-table tbody td") == MODEL_ID
    model_row = row_texts(page, page.el("#models-table tbody tr"))
    assert model_row[2] == "llama" and model_row[3] and model_row[4] == "F32"    # family, size, quantization
    page.screenshot("status_view_busy")
    page.el("body").send_keys(Keys.ESCAPE)         # Esc stops, from any view
    page.wait(lambda: page.text("#busy-slots") == "0 / 2", "the status view never showed the slot free")
    page.el("#tab-chat").click()
    assert "stopped" in page.text("#messages .message.assistant:last-child .meta")


def row_texts(browser: Browser, row) -> list[str]:
    return browser.js("return [...arguments[0].cells].map(c => c.textContent)", row)


@pytest.fixture(scope="module")
def editor_server(models_dir):
    """One slot, and a model with FIM tokens: an editor completion parks the chat in it."""
    srv = ServerProcess(slow_model(models_dir), "--model-id", "coder", "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def test_status_view_lists_a_job_parked_for_an_editor_completion(browser, editor_server, request):
    port = editor_server.port
    chat, completion = RawConnection(port, timeout=60), RawConnection(port, timeout=60)
    try:
        chat.send(post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "a long story"}],
                                                     "max_tokens": 8000, "stream": True, "logit_bias": NO_EOG}))
        chat.wait_for(b"\"content\"")                   # a token streamed: the only slot is the chat's
        fim_ids = token_ids(list(FIM_TOKENS.values()))         # FIM tokens would end the completion
        completion.send(post_json("/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": 8000,
                                              "stream": True, "logit_bias": {
                                                  **NO_EOG, **{str(fim_ids[t]): -100 for t in FIM_TOKENS.values()}}}))
        browser.wait(lambda: get(port, "/slots").json()["parked"], "the chat was never parked")
        browser.driver.set_window_size(1200, 800)
        browser.open(editor_server.base_url + "/")
        wait_for_models(browser)
        browser.el("#tab-status").click()
        browser.wait(lambda: browser.all("#parked-table tbody tr"), "the status view never listed the parked job")
        [parked] = get(port, "/slots").json()["parked"]
        [row] = [row_texts(browser, row) for row in browser.all("#parked-table tbody tr")]
        assert row[:3] == ["coder #0", "decoding", parked["request"]] and row[2].startswith("chat ")
        assert row[3] == f"{parked['prompt_tokens']} / {parked['prompt_tokens']} (100 %)"
        assert int(row[4]) == parked["generated_tokens"] > 0 and int(row[5]) == parked["cached_tokens"] > 0
        assert not browser.el("#no-parked").is_displayed()
        [slot] = [row_texts(browser, row) for row in browser.all("#slots-table tbody tr")]
        assert slot[1] in ("prefilling", "decoding") and slot[2].startswith("infill ")
        assert browser.console_errors() == []
    finally:
        browser.screenshot(request.node.name)
        completion.close()
        chat.close()
    browser.wait(lambda: not any(s["busy"] for s in get(port, "/slots").json()["slots"]),
                 "the dropped streams kept the slot")


def test_usable_at_phone_width(page):
    page.driver.set_window_size(390, 844)
    page.reload()
    wait_for_models(page)
    assert page.js("return document.documentElement.scrollWidth <= window.innerWidth")
    assert page.el("#prompt").is_displayed() and page.el("#send").is_displayed()
    assert not page.el("#sidebar").is_displayed()
    set_field(page, "max-tokens", "8")
    send_and_wait(page, "hi from a phone")
    page.el("#toggle-chats").click()
    assert page.el("#sidebar").is_displayed()
    page.el("#conversations .open").click()
    assert not page.el("#sidebar").is_displayed()
    assert page.js("return document.documentElement.scrollWidth <= window.innerWidth")
