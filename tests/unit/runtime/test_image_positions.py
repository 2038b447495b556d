"""A prompt's images as the scheduler and the slots see them, without llama.cpp: a prompt chunk
stops at an image (the runtime evaluates it apart, runtime/images.py), a kept prefix never ends
inside one, and an image's placeholder ids tell two images apart and find a repeated one."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from localserve.generation import ActiveGeneration, GenerationRequest, ImageChunk, outside_images, placeholder_id
from localserve.runtime.images import ImageWork, text_tokens
from localserve.runtime.jobs import Job, Slot
from localserve.runtime.kvslots import SlotKeeper
from localserve.runtime.promptcache import PromptCache, common_prefix
from localserve.runtime.scheduler import plan_batch


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Chunk:
    n_tokens, n_pos = 4, 4
    audio = False


def prompt_with_image(data: bytes, before=(1, 10, 11), after=(12, 13)) -> GenerationRequest:
    image = ImageChunk(len(before), 4, digest(data), Chunk())
    tokens = [*before, *[placeholder_id(image.digest)] * 4, *after]
    return GenerationRequest(prompt_tokens=tokens, images=[image])


def job_for(request: GenerationRequest, n_cached: int = 0) -> Job:
    slot = Slot(0)
    job = Job(ActiveGeneration(request), slot, sampler=None, n_cached=n_cached)
    job.start()
    return job


def test_placeholders_are_never_real_tokens_and_differ_by_image():
    a, b = placeholder_id(digest(b"a")), placeholder_id(digest(b"b"))
    assert a < 0 and b < 0 and a != b
    assert placeholder_id(digest(b"a")) == a


def test_the_same_image_is_a_shared_prefix_and_another_stops_it_at_the_image():
    first = prompt_with_image(b"screenshot").prompt_tokens
    assert common_prefix(first, prompt_with_image(b"screenshot", after=(12, 99)).prompt_tokens) == 8
    assert common_prefix(first, prompt_with_image(b"another").prompt_tokens) == 3


def test_a_prompt_chunk_stops_at_an_image_and_goes_on_after_it():
    job = job_for(prompt_with_image(b"x"))
    plan = plan_batch([job], n_batch=64)
    assert plan.entries == [(1, 0, 0, False), (10, 1, 0, False), (11, 2, 0, False)]
    job.decoded(3)
    assert job.image_here is job.request.images[0]
    assert plan_batch([job], n_batch=64).entries == []      # the image is the runtime's to evaluate
    job.decoded(4)                                           # ... as runtime/images.py does
    assert job.image_here is None
    assert plan_batch([job], n_batch=64).entries == [(12, 7, 0, False), (13, 8, 0, True)]


def test_a_kept_prefix_never_ends_inside_an_image():
    images = prompt_with_image(b"x").images
    assert [outside_images(images, n) for n in range(10)] == [0, 1, 2, 3, 3, 3, 3, 7, 8, 9]


def test_drafts_never_see_an_image_s_placeholders():
    request = prompt_with_image(b"x")
    assert text_tokens(request) == [1, 10, 11, 12, 13]


class MropeChunk:
    """An M-RoPE image of 2 x 3 tokens: max(2, 3) positions."""
    n_tokens, n_pos = 6, 3
    audio = False


def test_after_an_mrope_image_a_token_sits_at_its_index_less_the_positions_the_image_saved():
    image = ImageChunk(2, 6, digest(b"m"), MropeChunk())
    request = GenerationRequest(prompt_tokens=[1, 10, *[placeholder_id(image.digest)] * 6, 12, 13], images=[image])
    job = job_for(request)
    assert [job.position(i) for i in (0, 1, 2, 8, 9)] == [0, 1, 2, 5, 6]
    job.decoded(2 + 6)                      # the text before it, then the image (3 positions)
    assert plan_batch([job], n_batch=64).entries == [(12, 5, 0, False), (13, 6, 0, True)]


def test_inside_an_image_decoded_in_parts_there_is_no_text_to_plan():
    job = job_for(prompt_with_image(b"x"))
    job.decoded(3 + 2)                      # the text, then two of the image's four embeddings
    assert job.image_here is job.request.images[0] and job.text_left == 0
    assert plan_batch([job], n_batch=64).entries == []


class Sequences:
    """The engine's sequence calls a SlotKeeper makes, recorded: every cut succeeds."""
    def __init__(self):
        self.cuts = []

    def can_extend(self, seq_id, keep):
        return True

    def remove(self, seq_id, start=0, end=-1):
        self.cuts.append((seq_id, start, end))
        return True


def test_a_cancelled_prefill_keeps_its_whole_images_cut_at_their_kv_position():
    image = ImageChunk(2, 6, digest(b"m"), MropeChunk())
    request = GenerationRequest(prompt_tokens=[1, 10, *[placeholder_id(image.digest)] * 6, 12, 13], images=[image])
    engine = Sequences()
    keeper = SlotKeeper(engine, PromptCache(0))
    past_it, inside_it = job_for(request), job_for(request)
    past_it.decoded(2 + 6 + 1)              # the text, the image (3 positions), one token more
    keeper.keep_computed(past_it)
    assert engine.cuts[-1] == (0, 6, -1) and past_it.slot.tokens == request.prompt_tokens[:9]
    assert past_it.slot.kv_length == 6
    inside_it.decoded(2 + 4)                # the image decoded in part: cut where it starts
    keeper.keep_computed(inside_it)
    assert engine.cuts[-1] == (0, 2, -1) and inside_it.slot.tokens == [1, 10]


class PartsProjector:
    """A projector whose images are decoded in parts (vision.Projector.splits), noting each call."""
    def __init__(self):
        self.encoded, self.parts = [], []

    def splits(self, handle):
        return True

    def encode(self, handle):
        image = SimpleNamespace(handle=handle, seconds=0.5)
        self.encoded.append(image)
        return image

    def decode_part(self, image, start, count, position, seq_id):
        self.parts.append((image, start, count, position))


class Images:
    """The image counts ImageWork records (ServerMetrics.record_image)."""
    def __init__(self):
        self.seconds = []

    def record_image(self, seconds, audio=False):
        self.seconds.append(seconds)


def test_an_image_decoded_in_parts_is_encoded_once_and_its_job_holds_it_until_the_last_part():
    projector, metrics = PartsProjector(), Images()
    work = ImageWork(SimpleNamespace(projector=projector, n_batch=3), metrics)
    job = job_for(prompt_with_image(b"photo"))      # three text tokens, an image of four, two more
    job.decoded(3)
    for expected_in_parts in (True, False):
        [advance] = work.evaluate([job])
        assert advance.error is None and (advance.in_parts is not None) is expected_in_parts
        job.image_advanced(advance.decoded, advance.in_parts)      # as the runtime step applies it
    [image] = projector.encoded
    assert [(i, start, count) for i, start, count, _ in projector.parts] == [(image, 0, 3), (image, 3, 1)]
    assert job.n_past == 7 and job.stops.image_in_parts is None and metrics.seconds == [0.5]
    assert work.evaluate([job]) == []               # past the image: nothing more to evaluate
