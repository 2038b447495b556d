"""How embedding inputs are packed into batches (runtime/embedding_jobs.py), without a model."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from localserve.generation import QueueFull, RuntimeStopped
from localserve.runtime.embedding_jobs import EmbeddingJob, EmbeddingQueue, EmbeddingWork


def job(*lengths: int) -> EmbeddingJob:
    return EmbeddingJob([[7] * n for n in lengths])


def shape(pieces) -> list[tuple[str, int]]:
    return [(j.label, i) for j, i in pieces]


def labelled(label: str, *lengths: int) -> EmbeddingJob:
    j = job(*lengths)
    j.label = label
    return j


def test_inputs_pack_in_arrival_order_within_the_token_budget():
    q = EmbeddingQueue(threading.Condition(), max_queue=8)
    a, b = labelled("a", 30, 30, 30), labelled("b", 10, 50)
    q.enqueue(a)
    q.enqueue(b)
    assert shape(q.next_batch(64, 16)) == [("a", 0), ("a", 1)]          # a third 30 would pass 64
    assert shape(q.next_batch(64, 16)) == [("a", 2), ("b", 0)]          # one batch spans two calls
    assert shape(q.next_batch(64, 16)) == [("b", 1)]
    assert q.next_batch(64, 16) == []


def test_the_sequence_limit_cuts_a_batch_too():
    q = EmbeddingQueue(threading.Condition(), max_queue=8)
    q.enqueue(labelled("a", *[1] * 5))
    assert len(q.next_batch(64, 3)) == 3
    assert len(q.next_batch(64, 3)) == 2


def test_an_input_as_long_as_the_batch_goes_alone():
    q = EmbeddingQueue(threading.Condition(), max_queue=8)
    q.enqueue(labelled("a", 5, 64, 5))
    assert shape(q.next_batch(64, 16)) == [("a", 0)]
    assert shape(q.next_batch(64, 16)) == [("a", 1)]
    assert shape(q.next_batch(64, 16)) == [("a", 2)]


def test_a_full_queue_refuses_and_a_stopped_one_too():
    q = EmbeddingQueue(threading.Condition(), max_queue=1)
    q.enqueue(job(1))
    with pytest.raises(QueueFull):
        q.enqueue(job(1))
    q.take_all(stop=True)
    with pytest.raises(RuntimeStopped):
        q.enqueue(job(1))


class FakeSpec:
    batch_tokens, max_seqs = 8, 4


class CountingEmbedder:
    """Stands in for the llama.cpp context: a vector of [length, first token] per input."""
    spec = FakeSpec()

    def __init__(self):
        self.batches: list[int] = []

    def run(self, inputs):
        self.batches.append(len(inputs))
        return [np.array([len(t), t[0]], dtype=np.float32) for t in inputs]


def test_each_step_runs_one_batch_and_a_job_ends_with_its_last_input():
    embedder = CountingEmbedder()
    work = EmbeddingWork(threading.Condition(), 8, lambda: embedder)
    first = work.submit(EmbeddingJob([[1] * 3, [2] * 3, [3] * 3]))
    second = work.submit(EmbeddingJob([[4] * 2]))
    work.step()
    assert embedder.batches == [2] and not first.done.is_set()
    work.step()
    assert embedder.batches == [2, 2] and first.done.is_set() and second.done.is_set()
    assert [v.tolist() for v in first.vectors] == [[3, 1], [3, 2], [3, 3]]
    assert not work.pending


def test_a_cancelled_job_runs_no_more_batches():
    embedder = CountingEmbedder()
    work = EmbeddingWork(threading.Condition(), 8, lambda: embedder)
    gone = work.submit(EmbeddingJob([[1] * 4] * 4))
    work.step()
    gone.cancel()
    work.step()
    assert embedder.batches == [2] and gone.done.is_set() and gone.error is not None
    assert not work.pending
