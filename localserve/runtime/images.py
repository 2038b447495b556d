"""Image chunks evaluated between decode steps.

A prompt with images (generation.ImageChunk) is prefilled as text up to each image
(scheduler.py stops a prompt chunk there); when a job's sequence reaches an image, the step
evaluates it here before the batch runs. Where the model allows (vision.Projector.splits:
causal attention, a position per token) the image is encoded once and its embeddings are
decoded into the sequence in parts as large as a prompt chunk would be (the whole batch
alone, SHARED_PREFILL_CHUNK beside decoding streams), one part a step, so the other streams
keep stepping and a cancel is honoured between parts; otherwise (M-RoPE, Gemma 3's both-ways
attention over an image) it is evaluated whole. The speculator never sees an image's
placeholder ids. What was done for each job goes back to the runtime step, which applies it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from ..engine.engine import Engine
from ..generation import GenerationFailure, GenerationRequest, ImageChunk
from ..ops.metrics import ServerMetrics
from .jobs import Job, JobStatus
from .scheduler import SHARED_PREFILL_CHUNK

if TYPE_CHECKING:
    from ..engine.vision import EncodedImage

log = logging.getLogger("localserve.runtime")


class ImageAdvance(NamedTuple):
    """What a step's image work did for one job, for the runtime to apply (Job.image_advanced): the
    positions it put in the sequence, the image still being decoded in parts (None once whole);
    or the error that ends the job."""
    job: Job
    decoded: int = 0
    in_parts: EncodedImage | None = None
    error: GenerationFailure | None = None


class ImageWork:
    def __init__(self, engine: Engine, metrics: ServerMetrics):
        self.engine = engine
        self.metrics = metrics          # the model's (ModelMetrics), which records as ServerMetrics does

    def evaluate(self, jobs: list[Job]) -> list[ImageAdvance]:
        """Each prefilling job at an image gets it evaluated, or its next part: what was done for
        each, or why it failed (the runtime applies both)."""
        if not any(job.request.images for job in jobs):
            return []
        beside_others = any(job.status is JobStatus.DECODING for job in jobs)
        part = min(SHARED_PREFILL_CHUNK, self.engine.n_batch) if beside_others else self.engine.n_batch
        done = []
        for job in jobs:
            image = job.image_here if job.prefilling and not job.gen.cancelled else None
            if image is None:
                continue
            try:
                done.append(self._advance(job, image, part))
            except RuntimeError as exc:
                log.error("job %s (%s): %s", job.gen.id, job.request.label, exc)
                done.append(ImageAdvance(job, error=GenerationFailure("the vision projector failed to evaluate an image")))
        return done

    def _advance(self, job: Job, image: ImageChunk, part: int) -> ImageAdvance:
        projector, at, encoded = self.engine.projector, job.position(job.n_past), job.stops.image_in_parts
        if encoded is None and not projector.splits(image.handle):
            seconds = projector.evaluate(image.handle, at, job.slot.seq_id)
            self.metrics.record_image(seconds, image.handle.audio)
            return ImageAdvance(job, image.n_tokens)
        if encoded is None:
            encoded = projector.encode(image.handle)
        count = min(image.end - job.n_past, part)
        projector.decode_part(encoded, job.n_past - image.start, count, at, job.slot.seq_id)
        if job.n_past + count < image.end:
            return ImageAdvance(job, count, encoded)
        self.metrics.record_image(encoded.seconds, image.handle.audio)
        return ImageAdvance(job, count)


def text_tokens(request: GenerationRequest) -> list[int]:
    """The prompt's tokens less its images' placeholders: what the n-gram drafts may repeat."""
    if not request.images:
        return request.prompt_tokens
    return [token for token in request.prompt_tokens if token >= 0]
