"""The runtime's reasons to refuse or fail a job, as the answers clients get (dialects/failures.py)."""

from __future__ import annotations

import pytest

from localserve.dialects.failures import GRAMMAR_RETRY_AFTER_SECONDS, api_error, prompt_refusals, refusals
from localserve.dialects.anthropic.errors import ANTHROPIC_ERRORS
from localserve.errors import ApiError
from localserve.generation import (ContextOverflow, EmbeddingsUnavailable, GenerationFailure, GrammarBacklog,
                                   InvalidGrammar, JobCancelled, NoAllowedToken, PromptRefused, QueueFull,
                                   RuntimeStopped, SamplingTooSlow)
from localserve.settings import RETRY_AFTER_SECONDS


@pytest.mark.parametrize("failure, status, code, message, retry_after", [
    (QueueFull(), 503, "server_overloaded", "the server is busy: too many requests are queued; retry shortly",
     RETRY_AFTER_SECONDS),
    (GrammarBacklog(), 503, "server_overloaded", "the server is still finishing grammar work that went over the "
     "time limit; retry a request with a grammar or schema later", GRAMMAR_RETRY_AFTER_SECONDS),
    (RuntimeStopped(), 503, "server_shutting_down", "the server is shutting down", None),
    (InvalidGrammar("parse error at 1"), 400, "invalid_grammar", "parse error at 1", None),
    (SamplingTooSlow("too slow"), 400, "sampling_too_slow", "too slow", None),
    (NoAllowedToken("none left"), 400, "no_allowed_token", "none left", None),
    (EmbeddingsUnavailable("no context"), 503, "embeddings_unavailable", "no context", None),
    (JobCancelled("cancelled"), 499, "cancelled", "cancelled", None),
    (GenerationFailure("the engine failed to decode (status -1)"), 500, "server_error",
     "the engine failed to decode (status -1)", None),
])
def test_each_failure_has_its_status_code_and_message(failure, status, code, message, retry_after):
    error = api_error(failure)
    assert (error.status, error.code, error.message) == (status, code, message)
    assert error.headers == ([("Retry-After", str(retry_after))] if retry_after is not None else [])


def test_a_refused_submit_raises_the_answer_and_anthropic_reads_a_full_queue_as_529():
    with pytest.raises(ApiError) as caught:
        with refusals():
            raise QueueFull()
    assert ANTHROPIC_ERRORS.render(caught.value)[0] == 529


@pytest.mark.parametrize("failure, param, message", [
    (ContextOverflow(300, 256), "messages", "the request needs 300 prompt tokens but the context holds 256"),
    (ContextOverflow(1024, 256, at_least=True), "input",
     "the request needs at least 1024 prompt tokens but the context holds 256"),
])
def test_a_prompt_the_context_cannot_hold_is_context_length_exceeded_with_its_sizes(failure, param, message):
    with pytest.raises(ApiError) as caught:
        with prompt_refusals(param):
            raise failure
    error = caught.value
    assert (error.status, error.code, error.param, error.message) == (400, "context_length_exceeded", param, message)
    assert error.extra == {"n_prompt_tokens": failure.n_prompt_tokens, "n_ctx": 256}
    assert api_error(failure).param == "messages"


def test_a_prompt_that_cannot_be_built_is_a_400_naming_the_field_at_fault():
    with pytest.raises(ApiError) as caught:
        with prompt_refusals():
            raise PromptRefused("the chat template failed: boom", code="template_error", param="messages")
    error = caught.value
    assert (error.status, error.code, error.param, error.message) == (
        400, "template_error", "messages", "the chat template failed: boom")


def test_a_message_past_its_limit_loses_its_middle_and_keeps_both_ends():
    """Many messages quote a client's value whole: a 200 KB role made a 200 KB answer (hostile2)."""
    from localserve.errors import MAX_MESSAGE_CHARS
    long = ApiError(400, "invalid 'messages[0].role': got '" + "y" * 200_000 + "'; use user or assistant")
    assert len(long.message) < MAX_MESSAGE_CHARS + 50 and str(long) == long.message
    assert long.message.startswith("invalid 'messages[0].role': got 'yyy")
    assert long.message.endswith("yyy'; use user or assistant") and "characters left out" in long.message
    assert len(ANTHROPIC_ERRORS.render(long)[1]) < MAX_MESSAGE_CHARS + 200
    exact = "m" * MAX_MESSAGE_CHARS
    assert ApiError(400, exact).message == exact
