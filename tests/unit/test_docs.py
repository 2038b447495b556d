"""The documentation against the code: README.rst and docs/*.rst.

Each list is read from the code, not written here: the routes from the App's route table, the
flags from the command's argparse parsers, the per-model settings from models/catalogue.py, the
tool-call families from parsing/, the make targets from the Makefile. So a route, flag or
setting added to the code fails here until a page documents it. The pages must also be
well-formed reStructuredText (docutils reads each as GitHub renders it), every page must be
reachable from docs/index.rst or the README, and every link between them must land on a page
and a section that exist.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.rst"
PAGES = sorted(DOCS.glob("*.rst"))
README_MOST_LINES = 400         # the README says what localserve is and how to start; the rest is in docs/

LITERAL = re.compile(r"``([^`]+)``")
METHOD_AND_PATH = re.compile(r"^((?:GET|POST|PUT|PATCH|DELETE)(?:/(?:GET|POST|PUT|PATCH|DELETE))*) (/\S*)$")
PARAMETER = re.compile(r"\{[^/}]+\}")
LINK = re.compile(r"`[^`<]*<([^>`]+)>`__?")
MAKE = re.compile(r"(?:``|^\s+)make ([a-z][\w-]*)", re.MULTILINE)      # a command, not "make room"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def docs_text() -> str:
    return "\n".join(text(p) for p in PAGES)


# ---- routes -----------------------------------------------------------------------------------

def route_table() -> list[tuple[str, str]]:
    """(method, path pattern) for every route the App serves, its built-in page's files included."""
    from localserve.app import App
    from localserve.settings import Settings
    return sorted({(method, route.pattern) for route in App(Settings()).router.routes for method in route.methods})


def documented_endpoints(docs: str) -> list[tuple[set[str], re.Pattern[str]]]:
    """Each ``METHOD /path`` literal of the pages (``GET/POST /path`` names two methods): its
    methods, and a pattern its path matches routes by ({name} matches any parameter's name, a
    trailing * any file under the folder, a ?query is no part of the path)."""
    endpoints = []
    for literal in LITERAL.findall(docs):
        match = METHOD_AND_PATH.match(literal.strip())
        if match is None:
            continue
        path = match.group(2).split("?", 1)[0]
        pieces = [re.escape(p) for p in PARAMETER.split(path)]
        regex = r"\{[^/}]+\}".join(pieces)
        if regex.endswith(r"/\*"):
            regex = regex[:-2] + r"[^/{}]+"
        endpoints.append((set(match.group(1).split("/")), re.compile(regex + "$")))
    return endpoints


def undocumented(routes: list[tuple[str, str]], docs: str) -> list[str]:
    endpoints = documented_endpoints(docs)
    return [f"{method} {pattern}" for method, pattern in routes
            if not any(method in methods and regex.match(pattern) for methods, regex in endpoints)]


def test_every_route_is_documented_with_its_method():
    routes = route_table()
    assert len(routes) > 50, routes       # the table was read, not an empty one
    missing = undocumented(routes, docs_text())
    assert not missing, f"routes no page of docs/ names as ``METHOD /path``: {missing}"


def test_the_route_check_catches_an_undocumented_route_and_a_wrong_method():
    docs = "``POST /v1/chat/completions`` and ``GET/DELETE /v1/things/{id}`` and ``GET /webui/*``"
    routes = [("POST", "/v1/chat/completions"), ("GET", "/v1/things/{thing_id}"), ("DELETE", "/v1/things/{x}"),
              ("GET", "/webui/app.js")]
    assert undocumented(routes, docs) == []
    assert undocumented([("POST", "/v1/new")], docs) == ["POST /v1/new"]
    assert undocumented([("POST", "/v1/things/{id}")], docs) == ["POST /v1/things/{id}"]
    assert undocumented([("GET", "/webui/sub/app.js")], docs) == ["GET /webui/sub/app.js"]


# ---- flags and settings -----------------------------------------------------------------------

def long_flags(parser) -> list[str]:
    return sorted({s for action in parser._actions for s in action.option_strings if s.startswith("--")})


def flag_rows(page: str, prefix: str = "") -> set[str]:
    """The flags a page's tables document: each row opens with ``--flag …`` (``worker --flag``)."""
    rows = re.findall(r"^``" + re.escape(prefix) + r"(--[a-z][\w-]*)", page, flags=re.MULTILINE)
    return set(rows)


def test_every_flag_has_a_row_in_the_flags_page():
    from localserve.cli.flags import build_parser
    flags = long_flags(build_parser())
    assert "--ctx-size" in flags and "--model" in flags
    missing = sorted(set(flags) - flag_rows(text(DOCS / "flags.rst")))
    assert not missing, f"flags with no row in docs/flags.rst: {missing}"


def test_every_worker_flag_has_a_row_in_the_rpc_page():
    from localserve.cli.worker import build_parser
    flags = long_flags(build_parser())
    assert "--cache-dir" in flags
    missing = sorted(set(flags) - {"--help", "--version", "--log-level"} - flag_rows(text(DOCS / "rpc.rst"), "worker "))
    assert not missing, f"`localserve worker` flags with no row in docs/rpc.rst: {missing}"


def test_the_flag_check_catches_a_dropped_row():
    page = "``--model PATH``   the demo model\n``--ctx-size N``  training context\n``--port N``  8080"
    assert flag_rows(page) == {"--model", "--ctx-size", "--port"}
    assert "--ctx-size" not in flag_rows(page.replace("``--ctx-size N``  training context\n", ""))
    assert flag_rows("see ``--model``") == set()      # a mention in a sentence is no row


def test_every_per_model_setting_is_listed():
    from localserve.models.catalogue import PER_MODEL
    page = text(DOCS / "operations.rst")
    table_keys = page.split("``[models.NAME]`` tables in the config file", 1)[1].split("\n* ", 1)[0]
    missing = [key for key in (a.replace("_", "-") for a in PER_MODEL) if f"``{key}``" not in table_keys]
    assert not missing, f"[models.NAME] settings docs/operations.rst does not list: {missing}"


def test_every_tool_syntax_is_listed_under_its_flag():
    from localserve.parsing.family_detection import FAMILY_NAMES
    page = text(DOCS / "flags.rst")
    row = page.split("``--tool-syntax NAME``", 1)[1].split("\n``", 1)[0]
    missing = sorted(name for name in FAMILY_NAMES if not re.search(rf"\b{name}\b", row))
    assert not missing, f"--tool-syntax names docs/flags.rst does not list: {missing}"


# ---- commands ---------------------------------------------------------------------------------

def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", text(ROOT / "Makefile"), flags=re.MULTILINE))


def test_the_readme_names_the_two_commands_and_only_makefile_targets():
    readme = text(README)
    targets = makefile_targets()
    assert {"run", "test"} <= targets
    assert "make run" in readme and "make test" in readme
    named = set(MAKE.findall(readme))
    assert named - targets == set(), f"the README names make targets the Makefile lacks: {named - targets}"


def test_the_pages_name_only_makefile_targets():
    named = set(MAKE.findall(docs_text()))
    assert named, "no page names a make target"
    assert named - makefile_targets() == set(), f"docs/ names make targets the Makefile lacks: {named - makefile_targets()}"


def test_the_readme_stays_short():
    lines = len(text(README).splitlines())
    assert lines <= README_MOST_LINES, f"README.rst has {lines} lines: move detail to docs/"


# ---- the pages as a whole ---------------------------------------------------------------------

def links(path: Path) -> list[str]:
    return LINK.findall(text(path))


def test_every_page_is_linked_from_the_index_or_the_readme():
    linked = {(DOCS / target.split("#", 1)[0]).resolve() for target in links(DOCS / "index.rst")}
    linked |= {(ROOT / target.split("#", 1)[0]).resolve() for target in links(README)}
    orphans = [p.name for p in PAGES if p.name != "index.rst" and p.resolve() not in linked]
    assert not orphans, f"pages neither docs/index.rst nor README.rst links to: {orphans}"


def section_ids(path: Path) -> set[str]:
    from docutils import nodes
    tree = doctree(path)[0]
    return {i for section in tree.findall(nodes.section) for i in section["ids"]}


@pytest.mark.parametrize("path", [README] + PAGES, ids=lambda p: p.name)
def test_links_between_pages_land_on_a_page_and_a_section(path):
    for target in links(path):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        landing = (path.parent / file).resolve()
        assert landing.exists(), f"{path.name} links to {target}, which is not there"
        if anchor:
            assert anchor in section_ids(landing), f"{path.name} links to {target}: no such section"


def doctree(path: Path):
    """The page as docutils reads it, and what docutils had to say about it."""
    from docutils.core import publish_doctree
    warnings = io.StringIO()
    tree = publish_doctree(text(path), source_path=str(path),
                           settings_overrides={"report_level": 2, "halt_level": 5, "warning_stream": warnings,
                                               "file_insertion_enabled": False, "raw_enabled": False})
    return tree, warnings.getvalue()


@pytest.mark.parametrize("path", [README] + PAGES, ids=lambda p: p.name)
def test_every_page_is_well_formed_restructuredtext(path):
    _, warnings = doctree(path)
    assert not warnings, warnings


def test_the_rst_check_catches_a_broken_table_and_a_dangling_reference(tmp_path):
    broken = tmp_path / "broken.rst"
    broken.write_text("Title\n=====\n\n=====  ===\nab     c\n``--a-very-long-flag`` x\n=====  ===\n\nsee `Nowhere`_\n")
    _, warnings = doctree(broken)
    assert "Malformed table" in warnings and "Unknown target name" in warnings
