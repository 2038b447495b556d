"""The package's layout, read from the source with `ast`: no import cycles between localserve's
modules, and no import from a lower part to a higher one.

A request's path reads top to bottom, and so do the imports:

    cli, app            start-up: flags, config, wiring the parts together
    wire                socket, HTTP parser, response writer, routes, access checks
    dialects, webui     each API's JSON in and out, and the stream helpers they share; the built-in page
    models              the catalogue; loading, unloading, sharing out the models
    prompt, runtime     building a GenerationRequest; the runtime thread
    engine              llama.cpp, CPU weights, RPC
    parsing, grammar,   tool-call syntaxes, reasoning, incremental JSON; GBNF; SQLite;
    store, ops,         metrics, systemd, the demo model; the contract between dialects
    generation          and runtime (it names parsing's tool syntax and reasoning format)
    (the bottom)        settings, errors: shared by everyone

A module may import from its own floor or any floor below, never above; parts on one floor
may use each other, but no chain of imports may come back to where it started. Imports made
only for type checking count too: they tie the modules together just the same.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "localserve"

# Each part's floor: a higher floor may import a lower one, not the other way round.
FLOORS = {
    "__main__": 8, "cli": 8, "app": 8,
    "wire": 7,
    "dialects": 6, "webui": 6,
    "models": 5,
    "prompt": 4, "runtime": 4,
    "engine": 3,
    "parsing": 2, "grammar": 2, "store": 2, "ops": 2,
    "localserve": 1, "settings": 1, "errors": 1,
    "generation": 2,      # it names the tool families' and reasoning's types (parsing/)
    "conversation": 1,    # the typed conversation: dialects read into it, prompt/ renders it; stdlib only
    "image_headers": 1,   # what decoding an image will cost, from its header and structure; stdlib only
    "image_lzw": 1,       # what a GIF frame's LZW codes draw, followed without drawing; stdlib only
    "images": 1,          # an image's bytes checked from their header (format, size) into the conversation; stdlib only
    "audio_headers": 1,   # an audio file's structure (WAV chunks, MP3 tags, FLAC STREAMINFO) checked; stdlib only
    "audio": 1,           # a clip's bytes checked from their header (format, length) into the conversation; stdlib only
    "multipart": 1,       # a multipart/form-data body parsed from bytes within its limits; stdlib only
    "media_checks": 1,    # what an image or a clip must pass before libmtmd sees it, both kinds; stdlib only
}



def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The localserve modules `name` imports, anywhere in the file (functions, TYPE_CHECKING too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from . import module` imports the module itself, not just its package
            submodules = {f"{target}.{alias.name}" for alias in node.names} & modules.keys()
            found |= submodules or {target}
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = read_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets if FLOORS[part(a)] < FLOORS[part(b)]}


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan), each as a sorted tuple."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_belongs_to_a_floor():
    assert sorted(m for m in read_modules() if part(m) not in FLOORS) == []


def test_package_inits_import_nothing():
    """No re-export webs: a module is imported from where it lives."""
    inits = [p for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE]
    assert inits
    assert [str(p) for p in inits if any(isinstance(n, (ast.Import, ast.ImportFrom))
                                         for n in ast.walk(ast.parse(p.read_text())))] == []


def test_no_import_runs_up_a_floor():
    assert sorted(upward_arrows(import_graph())) == []


def test_no_import_cycles():
    assert sorted(cycles(import_graph())) == []


def test_the_checks_see_a_cycle_and_an_arrow_up():
    """The graph walk itself: a made-up cycle and upward arrow are found."""
    graph = {"localserve.parsing.a": {"localserve.dialects.b"}, "localserve.dialects.b": {"localserve.parsing.a"}}
    assert cycles(graph) == {("localserve.dialects.b", "localserve.parsing.a")}
    assert upward_arrows(graph) == {("localserve.parsing.a", "localserve.dialects.b")}


def test_importing_the_dialects_and_prompt_loads_no_llama_cpp():
    """Connection threads reach the engine through engine/facade.py, which needs no native
    library: a dialect, or the prompt builder, imported alone must not load llama_cpp."""
    script = (
        "import importlib, pkgutil, sys\n"
        "import localserve.dialects, localserve.prompt\n"
        "for package in (localserve.dialects, localserve.prompt):\n"
        "    for m in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('localserve.')))\n"
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=PACKAGE.parent, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert done.returncode == 0, done.stderr
    assert "localserve.dialects.openai.chat" in done.stdout     # the walk did import the dialects


def test_generation_names_the_types_of_its_fields():
    """The contract between dialects and runtime says what each field holds: no `Any`, no bare
    `list` or `dict` standing in for a type that lives elsewhere."""
    tree = ast.parse((PACKAGE / "generation.py").read_text())
    vague = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for field in (n for n in cls.body if isinstance(n, ast.AnnAssign)):
            names = {n.id for n in ast.walk(field.annotation) if isinstance(n, ast.Name)}
            bare = isinstance(field.annotation, ast.Name) and field.annotation.id in ("list", "dict", "object")
            if "Any" in names or bare:
                vague.append(f"{cls.name}.{ast.unparse(field.target)}: {ast.unparse(field.annotation)}")
    assert vague == []


# What only a dialect (or the wire under it) holds or does: an exchange, its writer and the
# writer's stream calls (a local `writer` of another kind, hf_json's, is not one).
EXCHANGE_NAMES = {"Exchange", "exchange"}
WRITER_ATTRIBUTES = {"writer", "start_stream", "end_stream", "peer_closed", "stream_open"}


def client_uses(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return (names & EXCHANGE_NAMES) | (attributes & (WRITER_ATTRIBUTES | EXCHANGE_NAMES))


def test_nothing_below_the_dialects_writes_to_a_client():
    """A model load, a job's events and its errors travel up as values; only dialects/ (and the
    wire) hold an exchange or write to a writer: a new dialect's stream shape is its own."""
    below = {name: path for name, path in read_modules().items() if FLOORS[part(name)] < FLOORS["dialects"]}
    assert "localserve.models.manager" in below
    assert sorted((name, sorted(uses)) for name, path in below.items() if (uses := client_uses(path))) == []


# What says HTTP (a status, a header): the wire's and the dialects' to give, never models/'.
HTTP_NAMES = {"ApiError", "context_exceeded", "ErrorShape"}


def imported_names(path: Path) -> set[str]:
    """The names a module imports (`from x import NAME`) and the modules it imports whole."""
    tree = ast.parse(path.read_text())
    names = {alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for alias in n.names}
    modules = {(n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return names | {alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names} | modules


def test_models_speak_no_http_and_read_no_runtime_global():
    """models/ says why it refuses in its own errors (models/errors.py), which dialects/failures.py
    turns into answers; and it asks a loaded model's runtime what it needs, never runtime/'s module
    state (pending_sample's count of abandoned samples)."""
    models = {name: path for name, path in read_modules().items() if part(name) == "models"}
    assert "localserve.models.manager" in models
    leaks = {name: sorted(imported_names(path) & (HTTP_NAMES | {"abandoned_running"}))
             for name, path in models.items()}
    assert sorted((name, found) for name, found in leaks.items() if found) == []
    pending = {name for name, path in models.items() if "localserve.runtime.pending_sample" in
               imports_of(name, path, read_modules())}
    assert pending == set()


def test_no_dialect_fits_images_or_renders_a_chat_itself():
    """Building the request (prompt/build.py: build_chat_request, render_prompt, fit_images) fits a
    request's images and clips to its model: a dialect that fits them with media_checks.py's
    fit_media or renders with the bare render_chat could skip that, or do it its own way."""
    dialects = {name: path for name, path in read_modules().items() if part(name) == "dialects"}
    found = sorted(name for name, path in dialects.items()
                   if imported_names(path) & {"fit_media", "without_media", "render_chat"})
    assert found == []


def test_handlers_see_a_served_model_not_the_loaded_one():
    """A connection thread gets a ServedModel (models/served.py: the ChatModel with its
    EngineFacade, the settings, the runtime's queue); the LoadedModel, whose Engine only the
    runtime thread may use, stays inside models/ (and the app that starts it)."""
    handlers = {name: path for name, path in read_modules().items() if part(name) in ("dialects", "webui", "wire")}
    modules = read_modules()
    assert sorted(name for name, path in handlers.items()
                  if "localserve.models.loaded" in imports_of(name, path, modules)) == []
    served = (PACKAGE / "models" / "served.py").read_text()
    assert "Engine\n" not in served and "from ..engine.engine" not in served and "runtime.runtime" not in served


# what would take a handler behind one of ServedModel's calls to the Runtime (or the Engine) itself
BEHIND_A_CALL = {"__self__", "__func__", "__closure__", "__globals__", "__wrapped__", "runtime"}


def test_a_served_model_holds_its_runtimes_calls_not_the_runtime():
    """ServedModel carries its runtime's calls (Callables), never the Runtime, an Engine or a
    Protocol standing for one; no handler module reaches behind a call (`__self__`,
    `__closure__`...) or reads a `runtime` off anything."""
    from dataclasses import fields

    from localserve.models.served import ServedModel
    annotations = {f.name: str(f.type) for f in fields(ServedModel)}
    assert {"submit", "submit_embedding", "submit_slot_request", "slot_state"} <= annotations.keys()
    assert sorted(name for name, annotation in annotations.items()
                  if re.search(r"\b(Runtime|Engine|JobQueue|Any)\b", annotation)) == []
    handlers = {name: path for name, path in read_modules().items() if part(name) in ("dialects", "webui", "wire")}
    assert "localserve.dialects.job_events" in handlers
    assert sorted((name, sorted(found)) for name, path in handlers.items()
                  if (found := attributes_read(path) & BEHIND_A_CALL)) == []


def attributes_read(path: Path) -> set[str]:
    """Every attribute named in a module (x.NAME, and getattr(x, "NAME") with a literal name)."""
    tree = ast.parse(path.read_text())
    found = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return found | {n.args[1].value for n in ast.walk(tree) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name) and n.func.id == "getattr" and len(n.args) > 1
                    and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)}


def test_the_reach_check_sees_a_handler_behind_a_call(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def slots(model):\n    runtime = model.submit.__self__\n"
                      "    return getattr(runtime, 'slots'), getattr(model.submit, '__closure__')\n")
    assert attributes_read(sneaky) & BEHIND_A_CALL == {"__self__", "__closure__"}


def test_ops_never_reads_the_app():
    """Metrics and the other ops get what they report through what app.py registers, never `app`."""
    ops = {name: path for name, path in read_modules().items() if part(name) == "ops"}
    assert "localserve.ops.metrics" in ops
    reads = {name: sorted(app_uses(path)) for name, path in ops.items()}
    assert sorted((name, uses) for name, uses in reads.items() if uses) == []


def app_uses(path: Path) -> set[str]:
    """`app` by name, as an argument or as an attribute (self.app)."""
    tree = ast.parse(path.read_text())
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in ("app", "App")}
    found |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "app"}
    found |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
              for a in n.args + n.kwonlyargs if a.arg == "app"}
    return found


def test_the_client_and_app_checks_see_what_they_look_for(tmp_path):
    """The two walks above on made-up modules: a manager that streams, a metric that reads the app."""
    streams = tmp_path / "streams.py"
    streams.write_text("def wait(exchange):\n    exchange.writer.start_stream()\n")
    reads = tmp_path / "reads.py"
    reads.write_text("class M:\n    def __init__(self, app):\n        self.app = app\n"
                     "    def ready(self):\n        return getattr(self.app, 'ready', None)\n")
    assert client_uses(streams) == {"exchange", "writer", "start_stream"}
    assert app_uses(reads) == {"app"}


def test_no_handler_reads_the_app():
    """Handlers get what they use when their routes are added (dialects/services.py): no module
    in dialects/ or webui/ names `app`, takes it, or reads `.app` off anything."""
    handlers = {name: path for name, path in read_modules().items() if part(name) in ("dialects", "webui")}
    assert "localserve.dialects.openai.chat" in handlers
    assert sorted((name, sorted(uses)) for name, path in handlers.items() if (uses := app_uses(path))) == []


def test_the_exchange_carries_only_the_request_and_its_answer():
    """Exchange is what the wire gives a handler: the request, the writer, the path's parameters
    (and the route's error shape, the request id); typed, no `Any`, no app and no model."""
    tree = ast.parse((PACKAGE / "dialects" / "exchange.py").read_text())
    exchange = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Exchange")
    fields = {ast.unparse(f.target): f.annotation for f in exchange.body if isinstance(f, ast.AnnAssign)}
    assert {"request", "writer", "params"} <= fields.keys()
    assert not {"app", "model"} & fields.keys()
    assert [name for name, annotation in fields.items()
            if "Any" in {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}] == []


def test_each_dialect_folder_adds_its_own_routes():
    """A new dialect is a folder under dialects/ whose routes.py has add_routes(table, services...);
    app.py's route table imports it: nothing else changes."""
    folders = sorted(p.parent.name for p in (PACKAGE / "dialects").glob("*/__init__.py"))
    assert "openai" in folders
    app = ast.parse((PACKAGE / "app.py").read_text())
    imported = {node.module.rpartition(".")[2] for node in ast.walk(app) if isinstance(node, ast.ImportFrom)
                and node.module and node.module.startswith("dialects.") and
                any(alias.name == "routes" for alias in node.names)}
    missing = []
    for folder in folders:
        routes = PACKAGE / "dialects" / folder / "routes.py"
        functions = {n.name for n in ast.walk(ast.parse(routes.read_text()))
                     if isinstance(n, ast.FunctionDef)} if routes.exists() else set()
        if "add_routes" not in functions or folder not in imported:
            missing.append(folder)
    assert missing == []
