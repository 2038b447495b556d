"""Which context checkpoint serves a prompt, which are taken and which dropped
(runtime/swa_checkpoints.py), without llama.cpp: a window's state is a stand-in buffer."""

from localserve.runtime.swa_checkpoints import (Checkpoint, CheckpointLimits, SwaCheckpoints, best_checkpoint,
                                               to_drop, worth_taking)

HEAD = list(range(100, 140))


def at(n: int, order: int = 0, size: int = 10, tokens=None) -> Checkpoint:
    return Checkpoint(list((tokens or HEAD)[:n]), bytearray(size), order)


def test_the_longest_checkpoint_at_or_before_the_shared_prefix_serves():
    checkpoints = [at(10), at(25), at(30)]
    prompt = HEAD[:28] + [1, 2, 3]
    assert best_checkpoint(checkpoints, prompt, keep=28).length == 25
    assert best_checkpoint(checkpoints, prompt, keep=20).length == 10


def test_a_checkpoint_of_other_tokens_or_of_the_whole_prompt_does_not_serve():
    other = at(20, tokens=[7] * 40)
    assert best_checkpoint([other], HEAD, keep=30) is None
    # the prompt's last token is always computed: a checkpoint holding all of it cannot serve
    assert best_checkpoint([at(12)], HEAD[:12], keep=12) is None
    assert best_checkpoint([at(11)], HEAD[:12], keep=12).length == 11


def test_one_within_the_spacing_of_a_checkpoint_of_the_same_tokens_is_not_taken():
    assert not worth_taking([at(20)], HEAD[:25], spacing=8)
    assert worth_taking([at(20)], HEAD[:28], spacing=8)
    assert worth_taking([at(20, tokens=[7] * 40)], HEAD[:25], spacing=8)
    assert not worth_taking([], [], spacing=8)


def test_the_oldest_go_first_per_slot_then_across_slots_for_memory():
    a, b, c = at(10, order=0), at(20, order=1), at(30, order=2)
    d = at(5, order=3)
    limits = CheckpointLimits(per_slot=2, total_bytes=25, spacing=1)
    dropped = to_drop({0: [a, b, c], 1: [d]}, limits)
    assert [(s, x.length) for s, x in dropped] == [(0, 10), (0, 20)]    # a: count; b: bytes (c, d: 20)


class WindowEngine:
    """Saves a window as a buffer naming the sequence's length; restores by recording it."""
    n_swa = 16

    def __init__(self):
        self.length = {0: 0}
        self.restored = []

    def save_window(self, seq_id):
        return bytearray(self.length[seq_id].to_bytes(4, "little"))

    def restore_window(self, seq_id, state, length):
        assert int.from_bytes(bytes(state), "little") == length
        self.restored.append(length)
        self.length[seq_id] = length
        return True


def test_taken_restored_and_forgotten_per_slot():
    engine = WindowEngine()
    checkpoints = SwaCheckpoints(engine, CheckpointLimits(per_slot=4, total_bytes=1 << 20, spacing=4))
    for n in (10, 12, 20):
        engine.length[0] = n
        checkpoints.take(0, HEAD[:n])
    assert [c.length for c in checkpoints.by_slot[0]] == [10, 20]        # 12 is within 4 of 10
    assert checkpoints.restore(0, HEAD[:22] + [1], keep=22) == 20
    assert checkpoints.restore(0, HEAD[:15] + [1], keep=15) == 10
    assert engine.restored == [20, 10]
    assert checkpoints.restore(0, [1, 2, 3], keep=2) == 0
    checkpoints.forget(0, beyond=15)
    assert [c.length for c in checkpoints.by_slot[0]] == [10]
    assert checkpoints.as_json()["count"] == 1


def test_a_model_without_a_sliding_window_takes_none():
    engine = WindowEngine()
    engine.n_swa = 0
    checkpoints = SwaCheckpoints(engine)
    checkpoints.take(0, HEAD)
    assert checkpoints.size == 0 and checkpoints.restore(0, HEAD + [1], keep=len(HEAD)) == 0
