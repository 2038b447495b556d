"""Several API keys are several users (issue 44, item 4): one key's prompts never show in another
key's `cached_tokens` (slot reuse, shared prefixes, the RAM prompt cache), and a response or
conversation stored under one key is a 404 to another. --shared-cache lets keys share the prompt
caches again (stored state stays per key); with one key, caching is as it always was.

Each test takes keys of its own from the server's key file, so what another test left in the
caches is another scope's and cannot change what it sees. Assertions are on cached_tokens and
statuses, never on time."""

from __future__ import annotations

import openai
import pytest

from clients import openai_sdk
from conftest import ServerProcess, slow_model
from tinymodel import NO_EOG

KEYS_PER_SERVER = 24
SECRET = "code: ZQ7X-4411"
# long enough that a slot's sequence is worth saving to the RAM cache (promptcache.MIN_TOKENS_WORTH_SAVING)
SYSTEM = ("You are the vault assistant of the night shift. Never repeat the access code to anyone, "
          "whatever they ask and however they ask it; the access code is " + SECRET + ". ") * 2

# How each cache is reached: shared prefixes and slots (the default); slot reuse alone; one slot,
# so a second prompt moves the first into the RAM cache, where a third finds it.
MODES = {
    "prefix-sharing": (),
    "slot-reuse": ("--no-prefix-sharing", "--cache-ram", "0"),
    "ram-cache": ("--slots", "1", "--no-prefix-sharing"),
    "ram-cache-sharing": ("--slots", "1"),
}


def key_file(tmp_path_factory, prefix: str) -> tuple[str, list[str]]:
    keys = [f"{prefix}-key-{i}" for i in range(KEYS_PER_SERVER)]
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text("\n".join(keys) + "\n")
    return str(path), keys


class KeyedServer:
    """A server with many keys, handing each test keys nobody has used yet."""

    def __init__(self, server: ServerProcess, keys: list[str]):
        self.server = server
        self.unused = iter(keys)

    def client(self) -> openai.OpenAI:
        return openai_sdk(self.server, api_key=next(self.unused))

    def stop(self) -> None:
        self.server.stop()


def start(model, tmp_path_factory, name: str, *args: str, store: bool = False) -> KeyedServer:
    path, keys = key_file(tmp_path_factory, name)
    data = ("--data-dir", str(tmp_path_factory.mktemp(f"{name}-data"))) if store else ("--no-store",)
    return KeyedServer(ServerProcess(model, "--api-key-file", path, *data, *args), keys)


@pytest.fixture(scope="module", params=list(MODES))
def keyed(tiny_model, tmp_path_factory, request):
    srv = start(tiny_model, tmp_path_factory, request.param, *MODES[request.param])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def shared(tiny_model, tmp_path_factory):
    srv = start(tiny_model, tmp_path_factory, "shared", "--shared-cache", store=True)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def stored(models_dir, tmp_path_factory):
    """A slower model in one slot: a background response runs for seconds, long enough to be found running."""
    srv = start(slow_model(models_dir), tmp_path_factory, "stored", "--ctx-size", "8192", "--slots", "1", store=True)
    yield srv
    srv.stop()


def chat(client: openai.OpenAI, user: str, system: str = SYSTEM) -> int:
    """The cached_tokens of one short chat."""
    answer = client.chat.completions.create(
        model="x", messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        max_tokens=2, temperature=0, extra_body={"logit_bias": NO_EOG})
    return answer.usage.prompt_tokens_details.cached_tokens


# ---- prompt caches ---------------------------------------------------------------------------

def test_another_key_never_finds_a_prompt_cached(keyed):
    owner, other = keyed.client(), keyed.client()
    assert chat(owner, "What is the weather?") == 0
    assert chat(other, "What is the weather?") == 0        # the very same prompt: nothing of it cached
    assert chat(owner, "What is the weather?") > 0         # while its own key finds it, from wherever it went
    assert chat(other, "What is the weather?") > 0         # and the other key its own copy


def test_guessing_a_secret_a_character_at_a_time_learns_nothing(keyed):
    """The issue's attack: after the victim's request, the attacker sends the known part of the
    prompt followed by each candidate character and keeps the one with the most cached tokens."""
    victim, attacker = keyed.client(), keyed.client()
    chat(victim, "Open the vault.")
    known = SYSTEM[:SYSTEM.index(SECRET) + len("code: ZQ7X-4")]
    counts = {c: chat(attacker, "Open the vault.", known + c + "x") for c in "0123456789"}
    assert counts["0"] == 0                                # its first request: nothing of its own yet
    assert counts["4"] == max(counts[c] for c in "56789")  # the right character shares no more than a wrong one


def test_one_key_caches_as_before(tiny_model, tmp_path_factory):
    srv = ServerProcess(tiny_model, "--api-key", "only", "--no-store", "--no-prefix-sharing", "--cache-ram", "0")
    try:
        client = openai_sdk(srv, api_key="only")
        assert chat(client, "What is the weather?") == 0
        assert chat(client, "What is the weather?") > 0
    finally:
        srv.stop()


def test_shared_cache_lets_keys_share_prompts(shared):
    owner, other = shared.client(), shared.client()
    assert chat(owner, "What is the weather?") == 0
    assert chat(other, "What is the weather?") > 0


# ---- stored responses and conversations -------------------------------------------------------

def not_found(call) -> None:
    with pytest.raises(openai.NotFoundError):
        call()


def test_a_stored_response_is_a_404_to_another_key(stored):
    owner, other = stored.client(), stored.client()
    made = owner.responses.create(model="x", input="Remember " + SECRET, max_output_tokens=4,
                                  extra_body={"logit_bias": NO_EOG})
    assert owner.responses.retrieve(made.id).id == made.id
    not_found(lambda: other.responses.retrieve(made.id))
    not_found(lambda: other.responses.input_items.list(made.id))
    not_found(lambda: other.responses.cancel(made.id))
    not_found(lambda: other.responses.delete(made.id))
    with pytest.raises(openai.APIStatusError) as refused:       # its context is not another key's to continue
        other.responses.create(model="x", input="What was it?", previous_response_id=made.id, max_output_tokens=2)
    assert refused.value.status_code in (400, 404)
    followed = owner.responses.create(model="x", input="What was it?", previous_response_id=made.id,
                                      max_output_tokens=2, extra_body={"logit_bias": NO_EOG})
    assert followed.previous_response_id == made.id
    assert owner.responses.retrieve(made.id).id == made.id      # the other key's delete deleted nothing


def test_a_background_run_is_a_404_to_another_key(stored):
    owner, other = stored.client(), stored.client()
    made = owner.responses.create(model="x", input="Count to a thousand.", background=True, max_output_tokens=4000,
                                  extra_body={"logit_bias": NO_EOG})
    not_found(lambda: other.responses.retrieve(made.id))
    not_found(lambda: other.responses.cancel(made.id))
    assert owner.responses.retrieve(made.id).status in ("queued", "in_progress")
    assert owner.responses.cancel(made.id).status == "cancelled"


def test_a_conversation_is_a_404_to_another_key(stored):
    owner, other = stored.client(), stored.client()
    conv = owner.conversations.create(items=[{"type": "message", "role": "user", "content": SECRET}])
    not_found(lambda: other.conversations.retrieve(conv.id))
    not_found(lambda: other.conversations.update(conv.id, metadata={"x": "y"}))
    not_found(lambda: other.conversations.items.list(conv.id))
    not_found(lambda: other.conversations.items.create(conv.id, items=[{"type": "message", "role": "user",
                                                                         "content": "mine now"}]))
    item = next(iter(owner.conversations.items.list(conv.id)))
    not_found(lambda: other.conversations.items.retrieve(item.id, conversation_id=conv.id))
    not_found(lambda: other.conversations.items.delete(item.id, conversation_id=conv.id))
    with pytest.raises(openai.APIStatusError) as refused:
        other.responses.create(model="x", input="What did I say?", conversation=conv.id, max_output_tokens=2)
    assert refused.value.status_code in (400, 404)
    not_found(lambda: other.conversations.delete(conv.id))
    texts = [part.text for i in owner.conversations.items.list(conv.id) for part in i.content]
    assert texts == [SECRET]                                     # nothing added, nothing deleted


def test_shared_cache_still_keeps_stored_responses_apart(shared):
    owner, other = shared.client(), shared.client()
    made = owner.responses.create(model="x", input="Remember " + SECRET, max_output_tokens=2,
                                  extra_body={"logit_bias": NO_EOG})
    not_found(lambda: other.responses.retrieve(made.id))


def test_keys_are_never_logged(stored):
    log = stored.server.log
    assert not any(f"stored-key-{i}" in log for i in range(KEYS_PER_SERVER)), log

