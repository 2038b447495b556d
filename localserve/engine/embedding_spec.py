"""What connection threads know of a model's embeddings (engine/embed.py works them out at load):
no llama.cpp here, so the dialects read it without loading the bindings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbeddingSpec:
    """What connection threads need to know to check and shape an embedding request."""
    pooling: str            # mean | cls | last | rank
    n_out: int              # floats per input: the embedding size, or rank's score count
    max_tokens: int         # the longest input: the embedding context
    batch_tokens: int       # tokens packed into one batch (--batch-size)
    max_seqs: int           # inputs packed into one batch
    encoder: bool           # no KV cache: run with llama_encode
    rerank_template: str | None     # the GGUF's "rerank" template ({query}, {document}), if any
    pair_tokens: tuple[int | None, int | None, int | None]   # BOS, end (EOS, else SEP), SEP, each if added

    @property
    def ranks(self) -> bool:
        return self.pooling == "rank"


def pair_tokens(spec: EmbeddingSpec, query: list[int], document: list[int]) -> list[int]:
    """A (query, document) pair as a reranker reads it, when the GGUF has no rerank template:
    [BOS] query [END] [SEP] document [END] [SEP], each special token where the vocabulary adds it
    (BERT: [CLS] q [SEP] d [SEP]). `query` and `document` are tokenized without specials."""
    bos, end, sep = spec.pair_tokens
    tail = [t for t in (end, sep) if t is not None]
    return ([bos] if bos is not None else []) + query + tail + document + tail
