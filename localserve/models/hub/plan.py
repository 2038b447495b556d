"""Which files a pull fetches, as llama-server chooses them (common/download.cpp): the model
whose name holds the quant (case-insensitive, then `.` or `-`), else Q4_K_M, else Q8_0, else
the first model; every part of a split model; and the projector beside it (vision or audio)."""

from __future__ import annotations

from dataclasses import dataclass

from ..gguf_files import best_projector, default_model, first_parts, matching_quant, parts_of, split_info, whole
from .errors import HubError
from .listing import Listing, RemoteFile
from .names import HubName


@dataclass(frozen=True)
class Plan:
    model: str                    # the first part's path: what the model is loaded from
    files: list[RemoteFile]       # every part, then the projector
    tag: str                      # the quant the model is named by


def plan_pull(listing: Listing, name: HubName) -> Plan:
    paths = sorted(listing.files)
    models = first_parts(paths)
    if not models:
        raise HubError(404, f"repo {listing.repo_id} holds no GGUF model", "no_gguf")
    chosen = matching_quant(paths, name.quant) if name.quant else default_model(paths)
    if chosen is None:
        quants = sorted({split_info(p).tag or p for p in models})
        raise HubError(404, f"repo {listing.repo_id} has no '{name.quant}' quant; it has {', '.join(quants)}",
                       "unknown_quant")
    info = split_info(chosen)
    parts = parts_of(paths, chosen)
    if not whole(parts):
        raise HubError(502, f"repo {listing.repo_id}: {chosen} is part 1 of {info.count} but the repo lists "
                            f"{', '.join(parts[:4])}{' …' if len(parts) > 4 else ''}")
    projector = best_projector(paths, chosen)
    wanted = parts + ([projector] if projector else [])
    return Plan(chosen, [listing.files[p] for p in wanted], info.tag or info.prefix.rsplit("/", 1)[-1])
