"""The logprob arithmetic of one logits row (runtime/logprobs.py), against a float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

from localserve.runtime.logprobs import choose, distribution


def reference(logits: np.ndarray) -> np.ndarray:
    wide = logits.astype(np.float64)
    return wide - (wide.max() + np.log(np.exp(wide - wide.max()).sum()))


def test_the_row_stays_float32_and_agrees_with_a_float64_log_softmax():
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(50_000) * 8 + 3000).astype(np.float32)    # far from 0: exp alone overflows
    original = logits.copy()
    entry = distribution(logits, 3, lambda token: b"t%d" % token)
    assert entry["_all"].dtype == np.float32        # no float64 copy of the whole vocabulary per token
    want = reference(logits)
    best = np.argsort(-want)[:3]
    assert [t["token"] for t in entry["top_logprobs"]] == [f"t{t}" for t in best]
    assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(want[best], abs=1e-4)
    chosen = choose(entry, int(best[1]), b"x")
    assert chosen["logprob"] == pytest.approx(want[best[1]], abs=1e-4) and "_all" not in chosen
    assert chosen["id"] == int(best[1]) and [t["id"] for t in entry["top_logprobs"]] == [int(t) for t in best]
    assert np.array_equal(logits, original)          # the engine's row itself is left as it was
