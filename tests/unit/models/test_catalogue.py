"""The model catalogue read from its sources: --models-dir (split files once), [models.NAME]
tables in the config file (aliases, per-model settings checked as their flags are), --model
alone (any name); and the durations, sizes and GGUF header numbers it relies on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from localserve.cli.flags import UsageError, build_parser, resolve_settings
from localserve.engine.gguf_meta import estimate, read_shape
from localserve.engine.model_load import ModelLoadError
from localserve.models.catalogue import CatalogueError, read_catalogue, scan_dir
from localserve.models.units import KEEP_ALIVE_NEVER, parse_duration, parse_size

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from tinymodel import write_tiny_gguf  # noqa: E402


def settings_from(tmp_path: Path, toml: str = "", *flags: str):
    args = list(flags)
    if toml:
        config = tmp_path / "localserve.toml"
        config.write_text(toml)
        args += ["--config", str(config)]
    return resolve_settings(build_parser().parse_args(args), {})


def no_demo() -> str:
    raise AssertionError("the demo model is not wanted here")


def test_a_split_model_counts_once_by_its_name(tmp_path):
    for name in ("big-00001-of-00003.gguf", "big-00002-of-00003.gguf", "big-00003-of-00003.gguf",
                 "small.gguf", "notes.txt"):
        (tmp_path / name).write_bytes(b"GGUF")
    entries = {e.name: e.path for e in scan_dir(str(tmp_path))}
    assert entries == {"big": str(tmp_path / "big-00001-of-00003.gguf"), "small": str(tmp_path / "small.gguf")}


def test_config_tables_give_aliases_and_per_model_settings(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "coder.gguf").write_bytes(b"GGUF")
    (tmp_path / "dir" / "chat.gguf").write_bytes(b"GGUF")
    settings = settings_from(tmp_path, f"""
models-dir = "{tmp_path / 'dir'}"
ctx-size = 4096

[models.coder]
path = "{tmp_path / 'dir' / 'coder.gguf'}"
aliases = ["code", "qwen-coder"]
ctx-size = 16384
slots = 2
keep-alive = "10m"
tool-syntax = "hermes"
""")
    catalogue = read_catalogue(settings, no_demo)
    assert sorted(catalogue.names()) == ["chat", "coder"]      # the dir's coder.gguf is the table's, once
    coder = catalogue.find("qwen-coder")
    assert coder is catalogue.find("code") is catalogue.find("coder")
    own = coder.settings(settings)
    assert (own.ctx_size, own.slots, own.keep_alive, own.tool_syntax) == (16384, 2, 600.0, "hermes")
    chat = catalogue.find("chat").settings(settings)
    assert (chat.ctx_size, chat.slots) == (4096, settings.slots)
    assert catalogue.find("nope") is None and catalogue.find(None) is None   # two models: a name is needed


@pytest.mark.parametrize("table, complaint", [
    ('[models.a]\nctx-size = 512\n', "needs a path"),
    ('[models.a]\npath = "a.gguf"\nctx-size = "big"\n', "ctx-size"),
    ('[models.a]\npath = "a.gguf"\nport = 80\n', "not a per-model setting"),
    ('[models.a]\npath = "a.gguf"\naliases = "b"\n', "list of names"),
    ('models = 3\n', "[models.NAME] tables"),
])
def test_a_bad_table_is_a_usage_error_naming_it(tmp_path, table, complaint):
    with pytest.raises(UsageError, match=complaint.replace("[", r"\[")):
        settings_from(tmp_path, table)


def test_a_name_given_twice_and_an_unknown_tool_syntax_are_refused(tmp_path):
    settings = settings_from(tmp_path, '[models.a]\npath = "a.gguf"\naliases = ["b"]\n'
                                       '[models.b]\npath = "b.gguf"\n')
    with pytest.raises(CatalogueError, match="'b'"):
        read_catalogue(settings, no_demo)
    settings = settings_from(tmp_path, '[models.a]\npath = "a.gguf"\ntool-syntax = "klingon"\n')
    with pytest.raises(CatalogueError, match="klingon"):
        read_catalogue(settings, no_demo)


def test_model_alone_answers_any_name_and_a_models_dir_does_not(tmp_path):
    alone = read_catalogue(settings_from(tmp_path, "", "--model", "/m/tiny.gguf", "--model-id", "t"), no_demo)
    assert alone.any_name and alone.find("gpt-4o").name == "t"
    (tmp_path / "x.gguf").write_bytes(b"GGUF")
    both = read_catalogue(settings_from(tmp_path, "", "--model", "/m/tiny.gguf", "--models-dir", str(tmp_path)),
                          no_demo)
    assert not both.any_name and both.find("gpt-4o") is None and sorted(both.names()) == ["tiny", "x"]
    assert read_catalogue(settings_from(tmp_path), lambda: "/demo/gemma.gguf").find("anything").name == "gemma"


def test_a_name_answers_with_ollamas_latest_tag_unless_another_name_is_that(tmp_path):
    toml = ('[models.qwen]\npath = "/m/q.gguf"\naliases = ["qwen3:8b"]\n'
            '[models.llama]\npath = "/m/l.gguf"\n[models."llama:latest"]\npath = "/m/other.gguf"\n')
    catalogue = read_catalogue(settings_from(tmp_path, toml), no_demo)
    assert catalogue.find("qwen:latest").name == "qwen" and catalogue.exact("qwen:latest").name == "qwen"
    assert catalogue.find("qwen3:8b").name == "qwen"
    assert catalogue.find("llama:latest").path == "/m/other.gguf"      # a name that is the tagged one wins
    assert catalogue.find("qwen3:latest") is None and catalogue.find("qwen:7b") is None


def test_an_empty_models_dir_is_a_usage_error(tmp_path):
    with pytest.raises(CatalogueError, match="no \\*.gguf"):
        read_catalogue(settings_from(tmp_path, "", "--models-dir", str(tmp_path)), no_demo)


@pytest.mark.parametrize("text, seconds", [("5m", 300.0), ("1h30m", 5400.0), ("30s", 30.0), ("0", 0.0),
                                           ("-1", KEEP_ALIVE_NEVER), ("-5m", KEEP_ALIVE_NEVER), ("250ms", 0.25),
                                           (90, 90.0), ("2.5", 2.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "5x", "", "m", True, None, "1h 30m"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_sizes():
    assert parse_size("8G") == 8 * 1024 ** 3 and parse_size("512MiB") == 512 * 1024 ** 2
    assert parse_size("1048576") == 1048576 and parse_size("1.5k") == 1536
    for bad in ("lots", "8X", "0", "-1G"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert settings_from(Path("."), "", "--max-memory", "2G", "--keep-alive", "10m").max_memory == 2 * 1024 ** 3


def test_the_gguf_header_gives_the_memory_estimate(tmp_path):
    path = write_tiny_gguf(tmp_path / "m.gguf", n_embd=64, n_layer=2, n_head=4, context_length=2048)
    shape = read_shape(str(path))
    assert (shape.n_layer, shape.n_embd, shape.n_head, shape.n_head_kv, shape.n_ctx_train) == (2, 64, 4, 4, 2048)
    assert shape.n_vocab > 256 and shape.file_bytes == Path(path).stat().st_size
    needed = estimate(shape, n_ctx_seq=1024, n_seq=2, n_batch=512, reserve=0)
    assert needed.kv == 2 * 2 * 2048 * 64 * 2          # K and V, 2 layers, 2048 cells, 64 wide, f16
    assert needed.weights == shape.file_bytes and needed.total > needed.kv + needed.weights
    (tmp_path / "cut.gguf").write_bytes(Path(path).read_bytes()[:200])
    with pytest.raises(ModelLoadError, match="not a valid GGUF"):
        read_shape(str(tmp_path / "cut.gguf"))


# ---- vision projectors (models/pairing.py) ---------------------------------------------------

def test_a_projector_is_no_model_and_pairs_with_the_model_it_is_named_after(tmp_path):
    for name in ("SmolVLM-256M-Instruct-Q8_0.gguf", "mmproj-SmolVLM-256M-Instruct-f16.gguf",
                 "gemma-3-4b-it-Q4_K_M.gguf", "gemma-3-4b-it-mmproj-f16.gguf", "qwen3-0.6b.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    entries = {e.name: dict(e.overrides)["mmproj"] for e in scan_dir(str(tmp_path))}
    assert entries == {"SmolVLM-256M-Instruct-Q8_0": str(tmp_path / "mmproj-SmolVLM-256M-Instruct-f16.gguf"),
                       "gemma-3-4b-it-Q4_K_M": str(tmp_path / "gemma-3-4b-it-mmproj-f16.gguf"),
                       "qwen3-0.6b": None}


def test_a_projector_beside_the_only_model_is_its_whatever_its_name(tmp_path):
    for name in ("model.gguf", "mmproj.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    [entry] = scan_dir(str(tmp_path))
    assert entry.name == "model" and dict(entry.overrides)["mmproj"] == str(tmp_path / "mmproj.gguf")


def test_a_projector_named_after_no_model_is_left_unused(tmp_path):
    for name in ("alpha.gguf", "beta.gguf", "mmproj-zeta.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    assert all(dict(e.overrides)["mmproj"] is None for e in scan_dir(str(tmp_path)))


def test_mmproj_is_the_model_s_own_and_a_models_table_s(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    toml = f'[models.other]\npath = "{tmp_path / "m.gguf"}"\n[models.seeing]\npath = "{tmp_path / "m.gguf"}"\n' \
           f'mmproj = "{tmp_path / "p.gguf"}"\n'
    settings = settings_from(tmp_path, toml, "--model", str(tmp_path / "m.gguf"), "--mmproj", "/x/mmproj.gguf")
    catalogue = read_catalogue(settings, no_demo)
    assert catalogue.find("m").settings(settings).mmproj == "/x/mmproj.gguf"
    assert catalogue.find("other").settings(settings).mmproj is None       # --mmproj is --model's alone
    assert catalogue.find("seeing").settings(settings).mmproj == str(tmp_path / "p.gguf")


def test_mmproj_without_model_beside_a_catalogue_is_a_usage_error(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    settings = settings_from(tmp_path, "", "--models-dir", str(tmp_path), "--mmproj", "/x/mmproj.gguf")
    with pytest.raises(CatalogueError, match="--mmproj is --model's vision projector"):
        read_catalogue(settings, no_demo)


def test_a_projector_goes_to_every_quantisation_of_its_model(tmp_path):
    for name in ("gemma-3-4b-it-Q4_K_M.gguf", "gemma-3-4b-it-Q8_0.gguf", "mmproj-gemma-3-4b-it-f16.gguf",
                 "qwen3-8b.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    paired = {e.name: dict(e.overrides)["mmproj"] for e in scan_dir(str(tmp_path))}
    projector = str(tmp_path / "mmproj-gemma-3-4b-it-f16.gguf")
    assert paired == {"gemma-3-4b-it-Q4_K_M": projector, "gemma-3-4b-it-Q8_0": projector, "qwen3-8b": None}


def test_a_pulled_default_quant_takes_the_repo_s_bare_name_and_nothing_else():
    from localserve.models.catalogue import Catalogue, ModelEntry
    q8 = ModelEntry("org/r:Q8_0", "/c/q8.gguf", ("hf.co/org/r:Q8_0", "org/r", "hf.co/org/r"), source="hf-cache")
    own = ModelEntry("mine", "/m.gguf", ("Org/R:q4_k_m",))
    catalogue = Catalogue([own], found=[q8])
    q4 = ModelEntry("org/r:Q4_K_M", "/c/q4.gguf", ("hf.co/org/r:Q4_K_M", "org/r", "hf.co/org/r"), source="hf-cache")
    assert catalogue.add(q4) is None and catalogue.exact("org/r") is catalogue.entries["org/r:Q8_0"]
    changed = catalogue.add(q4, taking=("org/r", "hf.co/org/r"))
    assert [e.aliases for e in changed] == [("hf.co/org/r:Q8_0",)]
    assert catalogue.exact("hf.co/org/r") is q4 and catalogue.exact("org/r:latest") is q4
    assert catalogue.exact("ORG/R") is q4 and catalogue.exact("hf.co/org/r:q8_0") is changed[0]
    assert catalogue.entries["org/r:Q8_0"] is changed[0]
    assert catalogue.exact("org/r:q4_k_m") is None         # folded, the name is two models'
    taken = ModelEntry("mine", "/other.gguf", (), source="hf-cache")
    assert catalogue.add(taken, taking=("mine",)) is None   # a model's own name is never taken
