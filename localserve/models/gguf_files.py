"""What a GGUF file's name says of it, as llama.cpp reads names (common/download.cpp).

`Qwen3-8B-Q4_K_M-00001-of-00003.gguf`: part 1 of 3 of the model `Qwen3-8B-Q4_K_M`, whose
quantization tag is `Q4_K_M` (the last `-` or `.` separated word, upper-cased). A file whose
name holds `mmproj` is a projector; `imatrix`, `mtp-`, `eagle3-`, `dflash-` and `dspark-` files
are no model of their own either. The same reading names the models found in the Hugging Face
cache and LM Studio's folder and chooses the files a pull fetches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GGUF = ".gguf"
SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})$", re.IGNORECASE)
TAG = re.compile(r"[-.](?P<tag>[A-Z0-9_]+)$", re.IGNORECASE)
NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
PROJECTOR_WORD = "mmproj"
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")      # llama-server's choice when a name gives no quant


@dataclass(frozen=True)
class SplitInfo:
    prefix: str          # the name less `.gguf` and the part suffix (directories kept)
    tag: str             # the quantization tag, upper-cased ("" when the name has none)
    index: int           # 1-based part number (1 of 1 for a file in one piece)
    count: int


def split_info(path: str) -> SplitInfo | None:
    """The name's parts; None for a file that is not a .gguf."""
    if not path.lower().endswith(GGUF):
        return None
    prefix, index, count = path[:-len(GGUF)], 1, 1
    split = SPLIT.match(prefix)
    if split is not None:
        prefix, index, count = split["prefix"], int(split["index"]), int(split["count"])
    tag = TAG.search(prefix)
    return SplitInfo(prefix, tag["tag"].upper() if tag else "", index, count)


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def is_model(path: str) -> bool:
    """A GGUF that is a model itself (not a projector, an imatrix or a draft head)."""
    name = basename(path).lower()
    return name.endswith(GGUF) and not any(word in name for word in NOT_MODELS)


def is_projector(path: str) -> bool:
    name = basename(path).lower()
    return name.endswith(GGUF) and PROJECTOR_WORD in name


def first_parts(paths: list[str]) -> list[str]:
    """The models among `paths`: each whole file, and each split model by its first part."""
    found = []
    for path in paths:
        info = split_info(path)
        if info is not None and is_model(path) and info.index == 1:
            found.append(path)
    return found


def parts_of(paths: list[str], first: str) -> list[str]:
    """Every part of the split model whose first part is `first`, in order ([first] when whole)."""
    info = split_info(first)
    if info is None or info.count <= 1:
        return [first]
    parts = [p for p in paths if (s := split_info(p)) is not None and s.count == info.count
             and s.prefix == info.prefix]
    return sorted(parts, key=lambda p: split_info(p).index)


def whole(parts: list[str]) -> bool:
    """Whether parts_of found parts 1 to N of N, each once: a name can lie about its count, a
    part be missing, or two names (`-of-` and `-OF-`) claim one number."""
    info = split_info(parts[0])
    return info is not None and [split_info(p).index for p in parts] == list(range(1, info.count + 1))


def quant_bits(tag: str) -> int:
    """Q4_0 → 4, F16 → 16, BF16 → 16, IQ2_XXS → 2; 0 when the tag has no digit."""
    digits = re.search(r"\d+", tag)
    return int(digits.group()) if digits else 0


def best_projector(paths: list[str], model: str) -> str | None:
    """llama.cpp's choice of the projector for `model` among `paths`: in the model's directory
    or above it, the deepest first, then the closest in bits to the model's quantization."""
    model_dir = model.split("/")[:-1]
    model_info = split_info(model)
    model_bits = quant_bits(model_info.tag) if model_info else 0
    best, best_key = None, None
    for path in paths:
        if not is_projector(path):
            continue
        directory = path.split("/")[:-1]
        if directory != model_dir[:len(directory)]:
            continue
        info = split_info(path)
        key = (-len(directory), abs(quant_bits(info.tag) - model_bits), path)
        if best_key is None or key < best_key:
            best, best_key = path, key
    return best


def matching_quant(paths: list[str], quant: str) -> str | None:
    """The first model whose name holds the quant (case-insensitive) followed by `.` or `-`, as
    llama-server matches a `:quant`; its first part when split."""
    pattern = re.compile(re.escape(quant) + r"[.-]", re.IGNORECASE)
    for path in first_parts(paths):
        if pattern.search(basename(path)):
            return path
    return None


def default_model(paths: list[str]) -> str | None:
    """llama-server's model when a name gives no quant: Q4_K_M, else Q8_0, else the first."""
    for quant in DEFAULT_QUANTS:
        found = matching_quant(paths, quant)
        if found is not None:
            return found
    models = first_parts(paths)
    return models[0] if models else None
