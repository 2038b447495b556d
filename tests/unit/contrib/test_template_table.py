"""contrib/template_table.py, which writes the table of real templates in docs/tools.rst, still runs
on today's code, and its table is the page's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from template_corpus import corpus_dir

ROOT = Path(__file__).resolve().parents[3]


def load_script():
    spec = importlib.util.spec_from_file_location("template_table", ROOT / "contrib" / "template_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_documented_table_is_the_scripts():
    script = load_script()
    rows = [script.row(p.stem, p.read_text(encoding="utf-8")) for p in sorted(corpus_dir().glob("*.jinja"))]
    table = script.rst_table(rows)
    assert table in (ROOT / "docs" / "tools.rst").read_text(encoding="utf-8")
