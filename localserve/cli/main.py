"""`localserve`'s entry point: the `worker` and `pull` subcommands, or flags → Settings, then
check or serve."""

from __future__ import annotations

import sys

from .flags import EXIT_USAGE, UsageError, build_parser, configure_logging, resolve_settings


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        from .worker import main as worker_main
        return worker_main(argv[1:])
    if argv[:1] == ["pull"]:
        from .pull import main as pull_main
        return pull_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        settings = resolve_settings(args)
    except UsageError as exc:
        print(f"localserve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.log_level)
    if args.check:
        from .check import check  # imported late: loading llama_cpp takes a moment
        return check(settings)
    from ..app import serve
    return serve(settings)
