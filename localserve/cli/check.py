"""--check: the configuration and every model file checked, the resolved settings printed, and
nothing served."""

from __future__ import annotations

import logging
import sys

from ..app import EXIT_USAGE, App, StartupError
from ..engine.build_info import read_build_info
from ..engine.gguf_meta import read_shape
from ..engine.model_load import ModelLoadError, check_model_file, quiet_llama_logs
from ..models.facts import projector_encoders
from ..settings import Settings


def check(settings: Settings) -> int:
    """--check: validate the configuration and the model, print the resolved settings."""
    quiet_llama_logs(logging.WARNING)
    try:
        app = App(settings)
        app.load()
    except StartupError as exc:
        print(f"localserve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for name, value in sorted(vars(settings).items()):
        if name in ("api_key",) and value:
            value = [f"<{len(value)} key(s)>"]
        print(f"{name.replace('_', '-')} = {value!r}")
    bad = 0
    for entry in app.models.catalogue:      # the files of models not loaded: checked, not loaded
        try:
            check_model_file(entry.path)
            shape = read_shape(entry.path)
        except ModelLoadError as exc:
            print(f"localserve: model {entry.name}: {exc}", file=sys.stderr)
            bad += 1
            continue
        projector = entry.settings(settings).mmproj
        print(f"# model {entry.name}: {entry.path} ({entry.source}), {shape.n_layer} layers, "
              f"{shape.file_bytes // (1024 * 1024)} MiB"
              + (f", {' and '.join(projector_encoders(projector))} projector {projector}" if projector else ""))
    for model in app.models.loaded_models():
        info = model.engine.info
        print(f"# model {info.path}: {info.architecture}, {info.n_params} params, n_ctx {model.engine.n_ctx_seq}, "
              f"chat template {model.chat.template.source}, tool syntax {model.chat.tool_syntax}")
    build = read_build_info()
    print(f"# llama.cpp: {build.describe()}")
    if build.warning():
        print(f"localserve: warning: {build.warning()}", file=sys.stderr)
    app.close()
    return EXIT_USAGE if bad else 0
