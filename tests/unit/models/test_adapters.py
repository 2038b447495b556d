"""A model's LoRA adapters without the engine: `PATH[:SCALE]` specs, adapters found beside their
base in a --models-dir, `base+adapter` names, and the set each request runs under (llama-server's
rules: a request's `lora` is its whole set, POST /lora-adapters zeroes what it leaves out, every
scale within ±LORA_SCALE_LIMIT, an adapter llama.cpp refused never runs); the cache scope a set
gives a job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from localserve.dialects.fields import read_adapter_scales
from localserve.errors import ApiError
from localserve.models.adapter_files import AdapterSpecError, adapter_files, read_spec
from localserve.generation import cache_scope, scope_parts
from localserve.models.adapters import Adapter, AdapterTable
from localserve.models.errors import BadAdapter
from localserve.models.catalogue import CatalogueError, read_catalogue, scan_dir
from localserve.models.adapter_files import LORA_SCALE_LIMIT
from localserve.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from tinylora import write_tiny_lora  # noqa: E402
from tinymodel import write_tiny_gguf  # noqa: E402


def table(*errors) -> AdapterTable:
    return AdapterTable("tiny", [Adapter(i, f"a{i}", f"/x/a{i}.gguf", 1.0 if i == 0 else 0.0, error)
                                 for i, error in enumerate(errors)])


def refused(call) -> ApiError | BadAdapter:
    """What the call raises: a request's 400 (fields.py), or the model's refusal (a 400 too, failures.py)."""
    with pytest.raises((ApiError, BadAdapter)) as caught:
        call()
    assert getattr(caught.value, "status", 400) == 400
    return caught.value


def test_a_spec_is_a_path_and_maybe_a_scale():
    assert read_spec("/m/a.gguf") == read_spec("/m/a.gguf:1")
    assert read_spec("/m/a.gguf:0.25").scale == 0.25
    assert read_spec("C:/m:x/a.gguf").path == "C:/m:x/a.gguf"
    with pytest.raises(AdapterSpecError):
        read_spec("/m/a.gguf:inf")
    assert read_spec("/m/a.gguf:-4").scale == -4
    with pytest.raises(AdapterSpecError, match="outside -4 to 4"):
        read_spec("/m/a.gguf:100")          # what a request may not ask for, --lora may not either
    with pytest.raises(AdapterSpecError, match="named 'a'"):
        adapter_files(["/m/a.gguf", "/n/a.gguf:0.5"])


def test_a_request_runs_its_list_else_its_model_name_else_the_global_scales():
    adapters = table(None, None)
    assert adapters.resolve(None) == ((0, 1.0),)                       # global: a0 at 1, a1 at 0
    assert adapters.resolve(()) == ()                                  # listed none: none
    assert adapters.resolve(((1, 0.5),)) == ((1, 0.5),)                # not listed: 0
    assert adapters.resolve(((0, 0.0), (1, 2.0))) == ((1, 2.0),)
    assert adapters.resolve(None, "a1") == ((1, 1.0),)
    assert adapters.resolve(((0, 0.5),), "a1") == ((0, 0.5),)          # the list wins
    adapters.set_scales(((1, -0.5),))
    assert adapters.resolve(None) == ((1, -0.5),)
    assert [a["scale"] for a in adapters.as_json()] == [0.0, -0.5]


def test_bad_requests_name_what_is_wrong():
    adapters = table(None, "wrong shapes")
    assert "no LoRA adapter 5" in refused(lambda: adapters.resolve(((5, 1.0),))).message
    assert "wrong shapes" in refused(lambda: adapters.resolve(((1, 1.0),))).message
    assert refused(lambda: adapters.resolve(None, "a1")).param == "model"
    assert adapters.resolve(((1, 0.0),)) == ()                         # off: no harm
    assert "wrong shapes" in refused(lambda: adapters.set_scales(((1, 1.0),))).message
    assert "LORA_SCALE_LIMIT" in refused(lambda: read_adapter_scales([{"id": 0, "scale": LORA_SCALE_LIMIT + 0.5}])).message
    assert read_adapter_scales([{"id": 0, "scale": -LORA_SCALE_LIMIT}]) == ((0, -LORA_SCALE_LIMIT),)
    for bad in ({"id": 0}, [1], [{"id": True}], [{"id": -1}], [{"id": 0, "scale": "1"}],
                [{"id": 0, "scale": float("nan")}]):
        assert refused(lambda: read_adapter_scales(bad)).param == "lora"
    assert read_adapter_scales([{"id": 1}, {"id": 0, "scale": 0.5}, {"id": 1, "scale": 2}]) == ((0, 0.5), (1, 2.0))


def test_each_set_is_a_cache_scope_of_its_own():
    scopes = {cache_scope("key", s) for s in ((), ((0, 1.0),), ((0, 0.5),), ((1, 1.0),), ((0, 1.0), (1, 1.0)))}
    assert len(scopes) == 5 and cache_scope("key", ()) == "key"
    assert cache_scope("", ((0, 1.0),)) != cache_scope("other", ((0, 1.0),))
    for adapters in ((), ((0, 1.0),), ((3, -0.1), (1, 1e-07))):
        assert scope_parts(cache_scope("key", adapters)) == ("key", adapters)
    assert scope_parts("") == ("", ())


def test_a_slot_file_names_its_set_and_a_model_without_one_of_them_refuses_it():
    table = AdapterTable("tiny", [Adapter(0, "alpha", "/a.gguf", 0.0), Adapter(1, "beta", "/b.gguf", 0.0),
                                  Adapter(2, "wide", "/w.gguf", 0.0, error="another width")])
    assert table.names_of(((1, 0.5), (0, 1.0))) == [["beta", 0.5], ["alpha", 1.0]]
    assert table.by_names([["beta", 0.5], ["alpha", 1.0]]) == ((1, 0.5), (0, 1.0))
    assert table.by_names([]) == ()
    for recorded, said in (([["gamma", 1.0]], "no LoRA adapter 'gamma'"), ([["wide", 1.0]], "another width"),
                           ([["alpha"]], "not [name, scale] pairs"), ("alpha", "not [name, scale] pairs")):
        with pytest.raises(BadAdapter) as caught:
            table.by_names(recorded)
        assert said in str(caught.value)


def test_adapters_in_a_models_dir_go_to_their_base(tmp_path):
    chat = write_tiny_gguf(tmp_path / "chat-model.gguf")
    coder = write_tiny_gguf(tmp_path / "coder.gguf", extra_metadata={"general.name": "Coder Base"})
    write_tiny_gguf(tmp_path / "other.gguf", arch="gemma3")
    write_tiny_lora(tmp_path / "chat-model-style.gguf", chat, seed=1)
    write_tiny_lora(tmp_path / "sql.gguf", coder, seed=2, base_name="Coder Base")
    write_tiny_lora(tmp_path / "orphan.gguf", chat, seed=3, arch="qwen2")
    entries = {e.name: e for e in scan_dir(str(tmp_path))}
    assert sorted(entries) == ["chat-model", "coder", "other"]
    assert [(f.name, f.scale) for f in entries["chat-model"].adapter_files()] == [("chat-model-style", 0.0)]
    assert [f.name for f in entries["coder"].adapter_files()] == ["sql"]
    assert entries["other"].adapter_files() == []


def test_lora_is_the_models_own_and_names_it(tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    settings = Settings(model=str(model), model_id="tiny", lora=[f"{tmp_path}/style.gguf:0.5"])
    catalogue = read_catalogue(settings, lambda: "")
    assert catalogue.exact("tiny+style").name == "tiny" and catalogue.find("tiny+style:latest").name == "tiny"
    assert catalogue.adapter_named("tiny+style") == "style" and catalogue.adapter_named("tiny") is None
    assert catalogue.adapter_named("tiny+other") is None
    with pytest.raises(CatalogueError, match="--lora is --model's"):
        read_catalogue(Settings(models_dir=str(tmp_path), lora=["x.gguf"]), lambda: "")
    with pytest.raises(CatalogueError, match="finite"):
        read_catalogue(Settings(model=str(model), lora=["x.gguf:nan"]), lambda: "")


def test_a_tables_lora_is_its_models_own(tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    settings = Settings(models={"chat": {"path": str(model), "lora": ["/m/style.gguf:0.5", "/m/sql.gguf"]},
                                "plain": {"path": str(model)}})
    catalogue = read_catalogue(settings, lambda: "")
    chat, plain = catalogue.exact("chat"), catalogue.exact("plain")
    assert [(f.name, f.scale) for f in chat.adapter_files()] == [("style", 0.5), ("sql", 1.0)]
    assert plain.adapter_files() == [] and hash(chat)
    assert catalogue.exact("chat+sql") is chat and catalogue.exact("plain+sql") is None
