"""A model's description from its GGUF header alone (engine/gguf_header.py, models/facts.py): read
against tiny GGUFs the `gguf` package writes, checked against that package's own reader, and
without llama.cpp ever imported."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader

from localserve.engine.gguf_header import HeaderError, read_header
from localserve.models.catalogue import ModelEntry
from localserve.models.facts import facts_of, human_number
from localserve.settings import Settings
from scripted_model import tool_loop_script, write_scripted_gguf
from tinymodel import CHATML_TEMPLATE, FIM_TOKENS, write_tiny_gguf


def test_the_header_says_what_the_gguf_package_reads(tmp_path):
    path = write_tiny_gguf(tmp_path / "m.gguf", chat_template=CHATML_TEMPLATE, context_length=4096,
                           special_tokens=[("<think>", "user_defined")], fim="legacy")
    header = read_header(str(path))
    reader = GGUFReader(path)
    assert header.n_params == sum(int(np.prod(t.shape)) for t in reader.tensors)
    assert (header.architecture, header.context_length, header.chat_template) == ("llama", 4096, CHATML_TEMPLATE)
    assert header.quantization == "F32"
    assert (header.bos_token, header.eos_token) == ("<s>", "</s>")
    assert header.special == {"<think>"}
    assert header.fim == {"pre": FIM_TOKENS["pre"], "suf": FIM_TOKENS["suf"], "mid": FIM_TOKENS["mid"]}
    assert read_header(str(path)) is header       # kept while the file is the same


def test_quantization_names_the_file_type_or_the_dominant_weights(tmp_path):
    quantised = read_header(str(write_tiny_gguf(tmp_path / "q.gguf", weight_type=GGMLQuantizationType.Q8_0,
                                                n_embd=128, n_ff=256, extra_metadata={"general.file_type": None})))
    assert quantised.quantization == "Q8_0"
    named = read_header(str(write_tiny_gguf(tmp_path / "n.gguf", extra_metadata={"general.file_type": 15})))
    assert named.quantization == "Q4_K_M"


@pytest.mark.parametrize("damage", [b"", b"GGUF", b"NOPE" + bytes(40), b"GGUF\x03\x00\x00\x00" + bytes(10)])
def test_a_damaged_header_is_a_header_error(tmp_path, damage):
    path = tmp_path / "bad.gguf"
    path.write_bytes(damage)
    with pytest.raises(HeaderError, match="bad.gguf"):
        read_header(str(path))


def test_a_header_cut_short_is_a_header_error(tmp_path):
    whole = write_tiny_gguf(tmp_path / "m.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:2000])
    with pytest.raises(HeaderError):
        read_header(str(cut))


def test_facts_say_what_a_load_would_find(tmp_path):
    agent = write_scripted_gguf(tmp_path / "agent.gguf", tool_loop_script("ls", {}, "Done.", reasoning="hm"))
    plain = write_tiny_gguf(tmp_path / "plain.gguf", chat_template=CHATML_TEMPLATE, context_length=16384,
                            fim="fim")
    settings = Settings(ctx_size=None)
    found = facts_of(ModelEntry("agent", str(agent)), settings)
    assert {"completion", "tools", "thinking"} <= set(found.capabilities) and "insert" not in found.capabilities
    tiny = facts_of(ModelEntry("plain", str(plain)), settings)
    assert tiny.capabilities == ("completion", "insert") and tiny.fim == tuple(FIM_TOKENS[p] for p in ("pre", "suf", "mid"))
    assert (tiny.n_ctx_train, tiny.n_ctx) == (16384, 8192)          # the default context is capped
    assert facts_of(ModelEntry("plain", str(plain)), Settings(ctx_size=512)).n_ctx == 512
    embedder = facts_of(ModelEntry("plain", str(plain), overrides=(("embeddings_only", True),)), settings)
    assert embedder.capabilities == ("embedding",)
    assert facts_of(ModelEntry("gone", str(tmp_path / "gone.gguf")), settings) is None


@pytest.mark.parametrize("n, shown", [(8_000_000_000, "8B"), (1_543_714_304, "1.5B"), (135_000_000, "135M"),
                                      (494_032_768, "494.03M"), (268_098_176, "268.10M"), (1_234, "1K"), (12, "12")])
def test_parameter_sizes_as_ollama_writes_them(n, shown):
    assert human_number(n) == shown


def test_reading_a_header_never_imports_llama_cpp(tmp_path):
    path = write_tiny_gguf(tmp_path / "m.gguf", chat_template=CHATML_TEMPLATE)
    code = ("import sys; from localserve.models.facts import facts_of; from localserve.models.catalogue import "
            "ModelEntry; from localserve.settings import Settings; "
            f"facts_of(ModelEntry('m', {str(path)!r}), Settings()); print('llama_cpp' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "False"
