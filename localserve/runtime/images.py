"""Image chunks evaluated between decode steps.

A prompt with images (generation.ImageChunk) is prefilled as text up to each image
(scheduler.py stops a prompt chunk there); when a job's sequence reaches an image, the step
evaluates it here before the batch runs. Where the model allows (vision.Projector.splits:
causal attention, a position per token) the image is encoded once and its embeddings are
decoded into the sequence in parts as large as a prompt chunk would be (the whole batch
alone, SHARED_PREFILL_CHUNK beside decoding streams), one part a step, so the other streams
keep stepping and a cancel is honoured between parts; otherwise (M-RoPE, Gemma 3's both-ways
attention over an image) it is evaluated whole. The speculator never sees an image's
placeholder ids.
"""

from __future__ import annotations

import logging

from ..engine.engine import Engine
from ..generation import GenerationFailure, GenerationRequest, ImageChunk
from ..ops.metrics import ServerMetrics
from .jobs import Job, JobStatus
from .scheduler import SHARED_PREFILL_CHUNK

log = logging.getLogger("localserve.runtime")


class ImageWork:
    def __init__(self, engine: Engine, metrics: ServerMetrics):
        self.engine = engine
        self.metrics = metrics          # the model's (ModelMetrics), which records as ServerMetrics does

    def evaluate(self, jobs: list[Job]) -> list[tuple[Job, GenerationFailure]]:
        """Each prefilling job at an image gets it evaluated, or its next part; the jobs that
        failed, with their errors (the runtime ends them)."""
        if not any(job.request.images for job in jobs):
            return []
        beside_others = any(job.status is JobStatus.DECODING for job in jobs)
        part = min(SHARED_PREFILL_CHUNK, self.engine.n_batch) if beside_others else self.engine.n_batch
        failed = []
        for job in jobs:
            image = job.image_here if job.prefilling and not job.gen.cancelled else None
            if image is None:
                continue
            try:
                self._advance(job, image, part)
            except RuntimeError as exc:
                log.error("job %s (%s): %s", job.gen.id, job.request.label, exc)
                job.image_in_parts = None
                failed.append((job, GenerationFailure("the vision projector failed to evaluate an image")))
        return failed

    def _advance(self, job: Job, image: ImageChunk, part: int) -> None:
        projector, at = self.engine.projector, job.position(job.n_past)
        if job.image_in_parts is None and not projector.splits(image.handle):
            seconds = projector.evaluate(image.handle, at, job.slot.seq_id)
            job.decoded(image.n_tokens)
            self.metrics.record_image(seconds, image.handle.audio)
            return
        if job.image_in_parts is None:
            job.image_in_parts = projector.encode(image.handle)
        count = min(image.end - job.n_past, part)
        projector.decode_part(job.image_in_parts, job.n_past - image.start, count, at, job.slot.seq_id)
        job.decoded(count)
        if job.n_past == image.end:
            self.metrics.record_image(job.image_in_parts.seconds, image.handle.audio)
            job.image_in_parts = None


def text_tokens(request: GenerationRequest) -> list[int]:
    """The prompt's tokens less its images' placeholders: what the n-gram drafts may repeat."""
    if not request.images:
        return request.prompt_tokens
    return [token for token in request.prompt_tokens if token >= 0]
