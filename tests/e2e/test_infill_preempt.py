"""With one slot, an editor's completion does not wait behind a long chat: it parks the chat
(runtime/preempt.py), runs, and the chat resumes where it was, its text unchanged.

The order is read from the streams, never from the clock: the completion's whole answer arrives
while the chat is still streaming (the chat's chunks received by then are fewer than its
max_tokens, and its last chunk comes after), and the server's log says where the chat was
parked. The chat's text is compared with the same chat run alone, greedily."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request
from tinymodel import CHATML_TEMPLATE, FIM_TOKENS, NO_EOG, token_ids, write_tiny_gguf

PRE, SUF, MID = (FIM_TOKENS[role] for role in ("pre", "suf", "mid"))
CONTEXT = 4096
CHAT_TOKENS = 1200      # long enough that the completion, sent after its first chunk, lands mid-chat


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("preempt-model") / "coder.gguf", chat_template=CHATML_TEMPLATE,
                           fim="repo", context_length=CONTEXT)
    srv = ServerProcess(path, "--slots", "1", "--ctx-size", str(CONTEXT), "--speculative", "off", "--no-store")
    yield srv
    srv.stop()


def no_end_bias() -> dict[str, int]:
    """A job runs to its max_tokens: no end-of-generation token, no FIM token (they end completions)."""
    ids = token_ids(list(FIM_TOKENS.values()))
    return {**NO_EOG, **{str(ids[text]): -100 for text in FIM_TOKENS.values()}}


def chat_body(prompt: str) -> dict:
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": CHAT_TOKENS, "temperature": 0,
            "logit_bias": no_end_bias(), "stream": True}


class StreamedChat:
    """A chat streamed on its own thread: its text pieces, counted as they arrive, and its request id."""

    def __init__(self, port: int, body: dict):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        self.request_id = self.response.getheader("x-request-id")
        self.pieces: list[str] = []
        self.finish_reason: str | None = None
        self.first_chunk = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in iter(self.response.readline, b""):
                if line.startswith(b"data: {"):
                    self._take(json.loads(line[len(b"data: "):]))
        except (OSError, http.client.HTTPException):
            pass            # the test closed the connection itself
        finally:
            self.conn.close()

    def _take(self, chunk: dict) -> None:
        for choice in chunk["choices"]:
            if choice["delta"].get("content"):
                self.pieces.append(choice["delta"]["content"])
                self.first_chunk.set()
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def text(self) -> str:
        self.thread.join(timeout=120)
        assert not self.thread.is_alive()
        return "".join(self.pieces)


def chat_alone(port: int, prompt: str) -> str:
    chat = StreamedChat(port, chat_body(prompt))
    return chat.text()


def parked_after(server: ServerProcess, request_id: str) -> int:
    """How many tokens the chat had written when the runtime parked it (its log line)."""
    assert server.wait_log(f" {request_id}) after "), server.log
    line = next(line for line in server.lines if "parked job" in line and f" {request_id}) " in line)
    return int(line.split(") after ")[1].split()[0])


EDITOR_REQUESTS = {
    "infill": ("/infill", {"input_prefix": "def f(x):\n    ", "input_suffix": "\n", "n_predict": 8,
                           "grammar": 'root ::= "return x"', "temperature": 0}, lambda a: a["content"]),
    "completions": ("/v1/completions", {"prompt": "def f(x):\n    ", "suffix": "\n", "max_tokens": 8,
                                        "grammar": 'root ::= "return x"', "temperature": 0},
                    lambda a: a["choices"][0]["text"]),
    # Continue's OpenAI provider: its own FIM template in a plain prompt (test_infill_continue.py)
    "completions-fim-prompt": ("/v1/completions", {"prompt": f"{PRE}def f(x):\n    {SUF}\n{MID}", "max_tokens": 8,
                                                   "grammar": 'root ::= "return x"', "temperature": 0},
                               lambda a: a["choices"][0]["text"]),
    "ollama": ("/api/generate", {"prompt": "def f(x):\n    ", "suffix": "\n", "stream": False,
                                 "options": {"num_predict": 8, "temperature": 0, "grammar": 'root ::= "return x"'}},
               lambda a: a["response"]),
    # Twinny (and Continue's fallback): its own FIM template sent raw to Ollama
    "ollama-raw-fim": ("/api/generate", {"prompt": f"{PRE}def f(x):\n    {SUF}\n{MID}", "raw": True, "stream": False,
                                         "options": {"num_predict": 8, "temperature": 0,
                                                     "grammar": 'root ::= "return x"'}},
                       lambda a: a["response"]),
}


STORY_PROMPT = "write me a long story"


@pytest.fixture(scope="module")
def story_alone(one_slot) -> str:
    """The chat's text run alone, once for every route: greedy, so each parked run must match it."""
    alone = chat_alone(one_slot.port, STORY_PROMPT)
    assert len(alone) > CHAT_TOKENS // 2          # a real, long text: "" == "" would prove nothing
    return alone


@pytest.mark.parametrize("route", sorted(EDITOR_REQUESTS))
def test_a_completion_parks_a_long_chat_which_then_goes_on_unchanged(one_slot, story_alone, route):
    port = one_slot.port
    chat = StreamedChat(port, chat_body(STORY_PROMPT))
    assert chat.first_chunk.wait(60)
    path, body, answer_text = EDITOR_REQUESTS[route]
    answer = request(port, post_json(path, {"model": "coder", **body}), timeout=60)
    received_by_then = len(chat.pieces)
    finished_by_then = chat.finish_reason is not None

    assert answer.status == 200, answer.body
    assert answer_text(answer.json()) == "return x"
    assert not finished_by_then and received_by_then < CHAT_TOKENS
    assert 0 < parked_after(one_slot, chat.request_id) < CHAT_TOKENS
    assert chat.text() == story_alone and chat.finish_reason == "length"


def test_a_warm_up_waits_its_turn(one_slot):
    """n_predict 0 only fills the cache: it parks nothing."""
    port = one_slot.port
    chat = StreamedChat(port, chat_body("a chat the warm-up waits for"))
    assert chat.first_chunk.wait(60)
    warm = request(port, post_json("/infill", {"input_prefix": "x", "input_suffix": "y", "n_predict": 0}), timeout=60)
    assert warm.status == 200
    assert len(chat.text()) > CHAT_TOKENS // 2
    assert not [line for line in one_slot.lines if "parked job" in line and f" {chat.request_id}) " in line]


def test_a_parked_chat_whose_client_leaves_is_cancelled(one_slot):
    port = one_slot.port
    chat = StreamedChat(port, chat_body("a chat that is dropped while parked"))
    assert chat.first_chunk.wait(60)
    completion = threading.Thread(target=request, args=(port, post_json("/infill", {
        "input_prefix": "a", "input_suffix": "b", "n_predict": 2000, "logit_bias": no_end_bias()}), 60))
    completion.start()
    assert parked_after(one_slot, chat.request_id) >= 0
    chat.conn.sock.shutdown(2)       # the client goes away while its chat is parked
    completion.join(60)
    assert one_slot.wait_cancelled(chat.request_id, "client went away")
    # it ended while parked: it never came back into the slot
    assert not [line for line in one_slot.lines if "resumed job" in line and f" {chat.request_id}) " in line]
    state = slots(port)
    assert not any(s["busy"] for s in state["slots"]) and state["queue_depth"] == 0 and state["parked"] == []


def slots(port: int) -> dict:
    return request(port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()


def slots_once(port: int, shows, what: str) -> dict:
    """/slots polled until shows(state) (a wait, not a timed assertion)."""
    for _ in range(600):
        state = slots(port)
        if shows(state):
            return state
        time.sleep(0.05)
    raise AssertionError(f"/slots never showed {what}: {state}")


def test_slots_list_the_parked_chat_then_show_it_resumed(one_slot):
    """While parked, the chat is listed under `parked` (its slot, how far it got) and the slot
    shows the completion; once resumed, the slot shows the chat again, its own prefix too."""
    port = one_slot.port
    prompt = "a chat /slots follows"
    chat_alone(port, prompt)            # the chat's run below finds its prompt in the slot: a prefix of its own
    chat = StreamedChat(port, chat_body(prompt))
    assert chat.first_chunk.wait(60)
    label = f"chat {chat.request_id}"
    before = slots(port)["slots"][0]
    assert before["job"]["request"] == label and before["prefix"]["tokens"] > 0

    completion = RawConnection(port, timeout=60)
    try:
        completion.send(post_json("/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": 3000,
                                              "stream": True, "logit_bias": no_end_bias()}))
        seen = b""
        while b"data: " not in seen:
            seen += completion.sock.recv(4096)        # the completion is generating: the chat is parked
        during = slots(port)
    finally:
        completion.close()              # the editor moves on: its completion is cancelled, the chat resumes
    [parked] = during["parked"]
    assert parked["request"] == label and parked["slot"] == 0 and parked["model"] == "coder"
    assert parked["generated_tokens"] == parked_after(one_slot, chat.request_id) > 0
    assert parked["status"] == "decoding" and parked["prompt_processed"] == parked["prompt_tokens"] > 0
    assert during["slots"][0]["job"]["request"].startswith("infill ") and during["queue_depth"] == 1

    after = slots_once(port, lambda state: (state["slots"][0]["job"] or {}).get("request") == label, "the chat resumed")
    assert after["parked"] == [] and after["queue_depth"] == 0
    assert after["slots"][0]["prefix"] == before["prefix"]
    assert after["slots"][0]["job"]["generated_tokens"] >= parked["generated_tokens"]
    assert len(chat.text()) > CHAT_TOKENS // 2 and chat.finish_reason == "length"


def test_a_parked_chats_timings_leave_the_pause_out(one_slot):
    """The chat's timings count its pause apart (parked_ms): it covers the whole completion, and
    prompt, predicted and parked time together fit in the chat's own round trip, so the pause is
    counted once. Durations compared with each other, never with a limit."""
    port = one_slot.port
    answers = {}

    def whole_chat() -> None:
        sent = time.monotonic()
        answers["chat"] = request(port, post_json("/v1/chat/completions", {**chat_body("a chat to time"),
                                                                           "stream": False}), timeout=120)
        answers["round_trip_ms"] = (time.monotonic() - sent) * 1000

    chat = threading.Thread(target=whole_chat)
    chat.start()
    slots_once(port, lambda state: (state["slots"][0]["job"] or {}).get("generated_tokens", 0) > 0,
               "the chat generating")
    completion = request(port, post_json("/infill", {"input_prefix": "c", "input_suffix": "d", "n_predict": 1000,
                                                     "logit_bias": no_end_bias()}), timeout=120)
    chat.join(120)
    assert completion.status == 200 and answers["chat"].status == 200
    assert parked_after(one_slot, answers["chat"].header("x-request-id")) > 0
    spent = completion.json()["timings"]
    timings = answers["chat"].json()["timings"]
    assert timings["parked_ms"] >= spent["prompt_ms"] + spent["predicted_ms"] > 0
    assert timings["prompt_ms"] + timings["predicted_ms"] + timings["parked_ms"] <= answers["round_trip_ms"]


FLOOD_LIMIT = 100       # completions each flooding thread sends at most; the chat must end long before
FLOOD_TOKENS = 32       # each completion's length: one thread's next request is queued before the other's ends


def metric(port: int, name: str) -> float:
    text = request(port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def test_a_flood_of_completions_parks_a_chat_for_a_bounded_while(one_slot):
    """Two threads loop /infill, a new X-Client-Id each time: the chat is parked, passed a
    bounded number of times (runtime/fairness.py), then finishes while the flood goes on: neither
    thread has run out of its loop when the chat's last chunk comes. Counted, never timed."""
    port = one_slot.port
    parks, resumes = metric(port, "localserve_parked_jobs_total"), metric(port, "localserve_resumed_jobs_total")
    before = slots(port)
    chat = StreamedChat(port, {**chat_body("a chat under a flood of completions"), "max_tokens": 1000})
    assert chat.first_chunk.wait(60)
    chat_done = threading.Event()
    sent, failures = [0, 0], []

    def flood(thread: int) -> None:
        while not chat_done.is_set() and sent[thread] < FLOOD_LIMIT:
            sent[thread] += 1
            answer = request(port, post_json("/infill", {"input_prefix": "def f(x):\n    ", "input_suffix": "\n",
                                                         "n_predict": FLOOD_TOKENS, "logit_bias": no_end_bias()},
                                             f"X-Client-Id: flood-{thread}-{sent[thread]}\r\n"), timeout=120)
            if answer.status != 200:
                failures.append(answer.body)

    threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    text = chat.text()
    left = [FLOOD_LIMIT - n for n in sent]
    chat_done.set()
    for thread in threads:
        thread.join(120)
    assert not failures
    assert len(text) > 500 and chat.finish_reason == "length"
    assert min(left) > 0, f"the chat finished only once the flood stopped ({sent} completions sent)"
    assert parked_after(one_slot, chat.request_id) > 0
    assert metric(port, "localserve_parked_jobs_total") > parks
    assert metric(port, "localserve_resumed_jobs_total") > resumes
    after = slots(port)
    assert after["parks"] > before["parks"] and after["resumes"] > before["resumes"]
    assert after["models"]["coder"]["parks"] == after["parks"]
