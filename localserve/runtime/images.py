"""Image chunks evaluated between decode steps.

A prompt with images (generation.ImageChunk) is prefilled as text up to each image
(scheduler.py stops a prompt chunk there); when a job's sequence reaches an image, the step
evaluates it here before the batch runs: the vision projector encodes it and decodes its
embeddings into the job's sequence at its positions (engine/vision.py). One image per job per
step, so the other jobs' tokens keep coming between two images, and a cancel is honoured
before each one. The speculator never sees an image's placeholder ids.
"""

from __future__ import annotations

import logging

from ..engine.engine import Engine
from ..generation import GenerationFailure, GenerationRequest
from ..ops.metrics import ServerMetrics
from .jobs import Job

log = logging.getLogger("localserve.runtime")


class ImageWork:
    def __init__(self, engine: Engine, metrics: ServerMetrics):
        self.engine = engine
        self.metrics = metrics          # the model's (ModelMetrics), which records as ServerMetrics does

    def evaluate(self, jobs: list[Job]) -> list[tuple[Job, GenerationFailure]]:
        """Each prefilling job whose sequence reached an image gets it evaluated; the jobs that
        failed, with their errors (the runtime ends them)."""
        failed = []
        for job in jobs:
            image = job.image_here if job.prefilling and not job.gen.cancelled else None
            if image is None:
                continue
            try:
                seconds = self.engine.evaluate_image(image.handle, job.position(job.n_past), job.slot.seq_id)
            except RuntimeError as exc:
                log.error("job %s (%s): %s", job.gen.id, job.request.label, exc)
                failed.append((job, GenerationFailure("the vision projector failed to evaluate an image")))
                continue
            job.decoded(image.n_tokens)
            self.metrics.record_image(seconds)
        return failed


def text_tokens(request: GenerationRequest) -> list[int]:
    """The prompt's tokens less its images' placeholders: what the n-gram drafts may repeat."""
    if not request.images:
        return request.prompt_tokens
    return [token for token in request.prompt_tokens if token >= 0]
