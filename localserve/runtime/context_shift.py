"""A context shift (Ollama's `shift`): a job whose sequence fills the context keeps its first
`keep` tokens (GenerationRequest.context_shift: Ollama's num_keep), drops half of the tokens
after them, and goes on generating, as Ollama's runners and llama-server's --context-shift do.

The dropped tokens leave the KV cache and the ones after them move back (their keys are
rotated to the new positions at the next decode): nothing is computed again. The job's
sampler, grammar and text stay as they were; only what the model attends to changes. A job
with images (their positions are not their indices), or a cache that cannot move positions
(Sequences.shifts_context), cannot shift: it stops at the context's end as any other job does.
"""

from __future__ import annotations

import logging

from ..engine.sequences import Sequences
from .jobs import Job
from .swa_checkpoints import SwaCheckpoints

log = logging.getLogger("localserve.runtime")


def at_context_end(job: Job, n_ctx_seq: int) -> bool:
    """The token being chosen would take the sequence's last position (outcome.finish_reason)."""
    return job.n_past + 1 >= n_ctx_seq


def shift_context(job: Job, sequences: Sequences, checkpoints: SwaCheckpoints) -> bool:
    """Make room for a job asking to shift at its context's end; False when it cannot."""
    keep = job.request.context_shift
    if keep is None or job.request.images or not sequences.shifts_context:
        return False
    keep = max(0, keep)
    drop = (job.n_past - keep) // 2
    seq_id = job.slot.seq_id
    if drop <= 0 or not sequences.remove(seq_id, keep, keep + drop):
        return False
    sequences.shift(seq_id, keep + drop, -drop)
    job.dropped(keep, drop)
    checkpoints.forget(seq_id, beyond=keep)     # past `keep` its tokens are no longer what they hold
    log.debug("job %s (%s): context shifted, %d tokens dropped after the first %d", job.gen.id,
              job.request.label, drop, keep)
    return True
