"""The models' refusals (models/errors.py) as the answers every dialect gives them
(dialects/failures.py): the same statuses, codes and fields the manager's ApiErrors had."""

from __future__ import annotations

import pytest

from localserve.dialects.failures import MODEL_RETRY_AFTER_SECONDS, model_error, refusals
from localserve.errors import ApiError
from localserve.models.errors import (BadModelRequest, ModelBusy, ModelError, ModelLoadFailed, ModelTooLarge,
                                      UnknownModel)


@pytest.mark.parametrize("refusal, status, code, param", [
    (BadModelRequest("keep_alive: no", param="keep_alive"), 400, None, "keep_alive"),
    (BadModelRequest("model is required", param="model", code="missing_model"), 400, "missing_model", "model"),
    (UnknownModel("model 'x' does not exist"), 404, "model_not_found", "model"),
    (ModelBusy.shortly("model 'x' is still busy"), 503, "model_busy", None),
    (ModelTooLarge("model 'x' needs about 9 MiB"), 503, "model_too_large", None),
    (ModelLoadFailed("cannot load model 'x'"), 500, "model_load_failed", None),
])
def test_each_refusal_has_its_status_code_and_field(refusal, status, code, param):
    error = model_error(refusal)
    assert (error.status, error.code, error.param, error.message) == (status, code, param, refusal.message)
    retry = [value for name, value in error.headers if name == "Retry-After"]
    assert retry == ([str(MODEL_RETRY_AFTER_SECONDS)] if isinstance(refusal, ModelBusy) else [])


def test_a_busy_model_asks_to_retry_shortly():
    assert model_error(ModelBusy.shortly("model 'x' is busy")).message == "model 'x' is busy; retry shortly"


def test_each_waiter_raises_its_own_copy_of_one_loads_refusal():
    refusal = BadModelRequest("num_ctx 9 needs more", param="num_ctx", code="context_too_large")
    copy = refusal.again()
    assert copy is not refusal and type(copy) is BadModelRequest
    assert (copy.message, copy.code, copy.param) == (refusal.message, refusal.code, refusal.param)
    failed = ModelLoadFailed("cannot load").again()
    assert isinstance(failed, ModelLoadFailed) and failed.code == "model_load_failed"


def test_refusals_turns_them_into_answers_and_lets_the_rest_through():
    with pytest.raises(ApiError) as caught, refusals():
        raise UnknownModel("model 'x' does not exist")
    assert caught.value.status == 404
    with pytest.raises(ApiError) as caught, refusals():
        raise ModelError("something else")
    assert caught.value.status == 500
    with pytest.raises(KeyError), refusals():
        raise KeyError("x")
