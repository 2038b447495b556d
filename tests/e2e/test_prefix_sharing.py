"""Shared prefixes on the real engine (issue 35): a prompt head another sequence holds, idle or busy,
is copied into a new job's sequence instead of computed; concurrent jobs sharing a head not yet
computed wait for the first to compute it; a copy changes no output; a cancel loses nothing.
Assertions are on tokens and counters (cached_tokens, /slots, /metrics), never on time."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import CHATML_TEMPLATE, TINY_MODEL_SPECIAL_TOKENS, ServerProcess, slow_model
from localserve.conversation import Image, Message, Text
from promtext import parse
from rawhttp import RawConnection, chat_text, post_json, request, run_concurrently
from tinymodel import NO_EOG, write_tiny_gguf
from tinyvision import QWEN2VL_TEXT, checkerboard, png_bytes, solid, write_tiny_mmproj, write_tiny_qwen2vl_mmproj
from vision_engine import assert_same_as_bare, bare_reference, images_encoded, loaded_with_projector, run


@pytest.fixture(scope="module")
def long_model(models_dir):
    """The tiny ChatML model with room for the issue's 2,000-token heads."""
    return write_tiny_gguf(models_dir / "tiny-long.gguf", chat_template=CHATML_TEMPLATE,
                           special_tokens=TINY_MODEL_SPECIAL_TOKENS, context_length=8192)


def started(model, *args):
    return ServerProcess(model, "--slots", "4", "--ctx-size", "4096", "--no-store", *args)


@pytest.fixture(scope="module", params=["streams", "unified"])
def shared(long_model, request):
    """Prefix sharing by data copies between KV streams (the default), and by cells that several
    sequences own in one unified cache (--kv-unified)."""
    srv = started(long_model, *(("--kv-unified",) if request.param == "unified" else ()))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def unshared(long_model):
    srv = started(long_model, "--no-prefix-sharing")
    yield srv
    srv.stop()


def head(word: str, times: int = 90) -> str:
    """A long system prompt of its own for each test, so no test reuses another's sequences."""
    return f"You are the {word} agent; read the tools before acting. " * times


def body(system: str, user: str, max_tokens: int = 4, **extra) -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens, "temperature": 0, "logit_bias": NO_EOG, **extra}


def chat(port: int, b: dict) -> dict:
    resp = request(port, post_json("/v1/chat/completions", b), timeout=300)
    assert resp.status == 200, resp.body
    return resp.json()


def cached(answer: dict) -> int:
    return answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def tokens(port: int, b: dict) -> list[int]:
    """The prompt tokens a chat body gives the model: its template rendered, then tokenized."""
    prompt = request(port, post_json("/apply-template", {"messages": b["messages"]})).json()["prompt"]
    return request(port, post_json("/tokenize", {"content": prompt, "add_special": True})).json()["tokens"]


def common(*lists: list[int]) -> int:
    n = 0
    while all(len(t) > n and t[n] == lists[0][n] for t in lists):
        n += 1
    return n


def slots(port: int) -> list[dict]:
    return request(port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["slots"]


def scrape(port: int):
    return parse(request(port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode())


# ---- the three measurements --------------------------------------------------------------

def test_a_warm_head_is_copied_into_every_concurrent_conversation(shared):
    """One request warms a head; four at once with the same head each start from all of it."""
    port, system = shared.port, head("warm")
    bodies = [body(system, user) for user in ("alpha one", "bravo two", "charlie three", "delta four")]
    chat(port, body(system, "zulu warms it"))
    before = scrape(port)
    answers = run_concurrently(chat, [(port, b) for b in bodies])
    after = scrape(port)
    prompts = [tokens(port, b) for b in [body(system, "zulu warms it"), *bodies]]
    assert [a["usage"]["prompt_tokens"] for a in answers] == [len(p) for p in prompts[1:]]
    shared_head = common(*prompts)
    assert shared_head > 1000
    assert [cached(a) for a in answers] == [shared_head] * 4

    def moved(source):
        name = "localserve_prompt_tokens_reused_total"
        return after.value(name, source=source) - before.value(name, source=source)

    # three take the empty slots and are handed the head; the last continues the warm slot's own
    assert (moved("slot"), moved("own"), moved("ram")) == (3 * shared_head, shared_head, 0)


def test_anthropic_cache_read_counts_a_copied_head(shared):
    port, system = shared.port, head("anthropic")
    chat(port, body(system, "zulu warms it"))
    message = {"model": "tiny", "max_tokens": 4, "system": system,
               "messages": [{"role": "user", "content": "alpha one"}]}
    usage = request(port, post_json("/v1/messages", message), timeout=300).json()["usage"]
    shared_head = common(tokens(port, body(system, "zulu warms it")), tokens(port, body(system, "alpha one")))
    assert usage["cache_read_input_tokens"] == shared_head


def test_concurrent_cold_requests_compute_their_shared_head_once(models_dir):
    """Four at once with a head nobody holds: the first computes it, the others wait and copy it."""
    srv = ServerProcess(slow_model(models_dir), "--slots", "4", "--ctx-size", "4096", "--batch-size", "128",
                        "--no-store")
    try:
        port, system = srv.port, head("cold", 40)
        bodies = [body(system, user, max_tokens=1) for user in ("alpha", "bravo", "charlie", "delta")]
        before = scrape(port)
        answers = run_concurrently(chat, [(port, b) for b in bodies])
        after = scrape(port)
        prompts = [tokens(port, b) for b in bodies]
        shared_head = common(*prompts)
        assert shared_head > 400
        got = sorted(cached(a) for a in answers)
        assert got[1:] == [shared_head] * 3 and got[0] < shared_head
        computed = after.value("localserve_prefilled_tokens_total") - before.value("localserve_prefilled_tokens_total")
        assert computed == sum(len(p) for p in prompts) - sum(got)        # the head once, four suffixes
        assert after.value("localserve_prefix_waits_total") - before.value("localserve_prefix_waits_total") >= 1
    finally:
        srv.stop()


def test_a_small_share_of_a_busy_conversation_is_copied_and_its_stream_goes_on_undisturbed(shared, unshared):
    """A prompt sharing a short head with a long busy conversation: too little to take its slot, but
    copied out of it; the busy stream is token for token what it is alone."""
    system = "You answer briefly and precisely, and you never guess."
    busy_body = body(system, "a long conversation " * 40, max_tokens=1500, stream=True)
    busy_prompt = tokens(shared.port, busy_body)
    streamed: list = []
    streaming = threading.Thread(target=lambda: streamed.append(
        request(shared.port, post_json("/v1/chat/completions", busy_body), timeout=300)))
    streaming.start()
    deadline = time.monotonic() + 60
    while not any(s["busy"] and s["kv_positions"] > len(busy_prompt) + 4 for s in slots(shared.port)):
        assert time.monotonic() < deadline, "the busy conversation never started decoding"
        time.sleep(0.01)
    small = body(system, "short one")
    answer = chat(shared.port, small)
    state = slots(shared.port)
    busy_slot = next(s for s in state if s["busy"])       # still generating once the small one is done
    shared_head = common(busy_prompt, tokens(shared.port, small))
    assert 16 < shared_head < 0.2 * len(busy_prompt)
    assert cached(answer) == shared_head
    assert {"tokens": shared_head, "source": "slot", "slot": busy_slot["id"]} in [s["prefix"] for s in state]
    streaming.join(300)
    alone = chat(unshared.port, {**busy_body, "stream": False})["choices"][0]["message"]["content"]
    assert alone and chat_text(streamed[0]) == alone


# ---- a copy changes nothing in the output ----------------------------------------------------------

VARIANTS = {
    "greedy": ((), {}),
    "grammar": ((), {"grammar": 'root ::= "tool(" [a-z ]+ ")" [a-z ]*'}),
    "speculative": (("--speculative", "ngram", "--draft-max", "8"), {}),
    "unified": (("--kv-unified",), {}),
    "unified grammar": (("--kv-unified",), {"grammar": 'root ::= "tool(" [a-z ]+ ")" [a-z ]*'}),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_copied_head_gives_the_output_of_the_same_job_computed_from_scratch(variant, long_model, unshared):
    """A fresh server, so the job finds an empty slot and copies the head into it."""
    args, extra = VARIANTS[variant]
    srv = started(long_model, *args)
    try:
        system = head(f"copy {variant.replace(' ', '-')}", 50)
        chat(srv.port, body(system, "first question"))
        job = body(system, "second question, a different one", max_tokens=48, **extra)
        copied = chat(srv.port, job)
        scratch = chat(unshared.port, job)
        shared_head = common(tokens(srv.port, body(system, "first question")), tokens(srv.port, job))
        assert cached(copied) == shared_head and cached(scratch) < 20     # the other: computed, not copied
        assert {"tokens": shared_head, "source": "slot", "slot": 0} in [s["prefix"] for s in slots(srv.port)]
        text = copied["choices"][0]["message"]["content"]
        assert len(text) > 20
        assert text == scratch["choices"][0]["message"]["content"]
        assert copied["usage"]["completion_tokens"] == scratch["usage"]["completion_tokens"]
    finally:
        srv.stop()


def test_a_template_header_alone_is_not_worth_a_copy_as_data(long_model):
    """Every prompt shares its template's first tokens with every slot: a copy as data would move a
    whole conversation's positions to save those few, so only a unified cache's cells hand them on."""
    for args, header_copied in (((), False), (("--kv-unified",), True)):
        srv = started(long_model, *args)
        try:
            first = body(head("header"), "first")
            chat(srv.port, first)
            other = body("Something else entirely, nothing alike.", "second")
            header = common(tokens(srv.port, first), tokens(srv.port, other))
            assert 0 < header < 16
            assert cached(chat(srv.port, other)) == (header if header_copied else 0)
        finally:
            srv.stop()


# ---- a cancel hands the work on --------------------------------------------------------------------

def test_cancelling_the_first_of_jobs_waiting_on_its_head_still_serves_the_others(models_dir):
    srv = ServerProcess(slow_model(models_dir), "--slots", "4", "--ctx-size", "4096", "--batch-size", "32",
                        "--no-store")
    try:
        port, system = srv.port, head("cancelled", 80)
        before = scrape(port)
        first = RawConnection(port)
        first.send(post_json("/v1/chat/completions", body(system, "alpha", max_tokens=1)))
        deadline = time.monotonic() + 60
        while not any(s["busy"] and s["kv_positions"] > 0 for s in slots(port)):
            assert time.monotonic() < deadline, "the first job never started its prefill"
            time.sleep(0.02)
        others = [body(system, user, max_tokens=1) for user in ("bravo", "charlie", "delta")]
        results: list = []

        def send_others():
            results.extend(run_concurrently(chat, [(port, b) for b in others]))

        sender = threading.Thread(target=send_others)
        sender.start()
        deadline = time.monotonic() + 60
        while scrape(port).value("localserve_queue_depth") < 3:     # 3 slots free: they wait for the head
            assert time.monotonic() < deadline, "the others were never queued behind the first"
            time.sleep(0.02)
        computed_so_far = max(s["kv_positions"] for s in slots(port) if s["busy"])
        first.close()
        sender.join(300)
        after = scrape(port)
        assert after.value("localserve_generations_total", finish_reason="cancelled") - \
            before.value("localserve_generations_total", finish_reason="cancelled") == 1
        prompts = [tokens(port, b) for b in [body(system, "alpha"), *others]]
        shared_head = common(*prompts)
        got = [cached(a) for a in results]
        assert len(got) == 3 and all(n >= computed_so_far > 0 for n in got), (got, computed_so_far)
        assert sorted(got)[1:] == [shared_head] * 2
        computed = after.value("localserve_prefilled_tokens_total") - before.value("localserve_prefilled_tokens_total")
        assert computed < 1.5 * shared_head      # the head was computed once, the cancelled part not again
    finally:
        srv.stop()


# ---- images: a head's image travels with it ------------------------------------------------------

VISION = {"plain": ({}, write_tiny_mmproj, png_bytes(checkerboard(20, 12))),
          "mrope": (QWEN2VL_TEXT, write_tiny_qwen2vl_mmproj, png_bytes(checkerboard(100, 40, cell=6)))}


@pytest.mark.parametrize("kind", VISION)
def test_a_head_with_an_image_is_copied_and_answers_as_computed_from_scratch(kind, tmp_path):
    """The image's placeholder ids carry its hash: a head holding it is copied into another slot's
    sequence, the image whole and not encoded again, cut at its KV position (on M-RoPE fewer than
    its tokens); the answer is libmtmd's own from scratch (bench/bare_vision.py). A different image
    shares only the text before it."""
    text_model, write_projector, png = VISION[kind]
    path = str(write_tiny_gguf(tmp_path / "tiny.gguf", chat_template=CHATML_TEMPLATE, **text_model))
    mmproj = str(write_projector(tmp_path / "mmproj.gguf"))
    with loaded_with_projector(kind, path, mmproj, ctx_size=1024, slots=2) as model, \
            bare_reference(path, mmproj, n_ctx=1024) as bare:
        system = Message("system", (Text(head("vision", 3)),))
        first = [system, Message("user", (Image(data=png, media_type="image/png"), Text("what is in it?")))]
        request, _ = run(model, first)
        [image] = request.images
        encoded = images_encoded(model)
        second = [system, Message("user", (Image(data=png, media_type="image/png"), Text("and its colours?")))]
        request2, copied = run(model, second)
        shared_head = common(request.prompt_tokens, request2.prompt_tokens)
        assert shared_head >= image.end and copied.cached_tokens == shared_head
        assert images_encoded(model) == encoded
        origins = [s["prefix"] for s in model.runtime.slot_state()["slots"]]
        assert {"tokens": shared_head, "source": "slot", "slot": 0} in origins
        assert_same_as_bare(model, bare, second, copied, tolerance=1e-4)
        other = [system, Message("user", (Image(data=png_bytes(solid(20, 12, (200, 30, 30))), media_type="image/png"),
                                          Text("what is in it?")))]
        _, answer = run(model, other)
        assert answer.cached_tokens == image.start and images_encoded(model) == encoded + 1
        assert_same_as_bare(model, bare, other, answer, tolerance=1e-4)
