"""Settings whose default follows another setting: given or not, through flags or built directly."""

from __future__ import annotations

from localserve.cli.flags import build_parser, resolve_settings
from localserve.settings import Settings, default_inflight_bytes


def test_the_in_flight_budget_follows_the_body_limit_however_settings_are_made():
    big = 100 * 1024 * 1024
    assert Settings(max_body_bytes=big).max_inflight_bytes == default_inflight_bytes(big) >= big
    flags = resolve_settings(build_parser().parse_args(["--max-body-bytes", str(big)]), environ={})
    assert flags.max_inflight_bytes == default_inflight_bytes(big)
    assert Settings(max_body_bytes=big, max_inflight_bytes=big).max_inflight_bytes == big


# Constants only one part reads that still wait in settings.py, with why.
NOT_MOVED_YET: dict[str, str] = {}


def test_settings_keeps_what_a_user_sets_and_what_several_parts_share():
    """A constant one part alone reads lives beside that part (issue 30, item 7): settings.py
    keeps the defaults of what a user can set (the CLI's flags, the Settings fields) and limits
    several parts share."""
    import ast
    from pathlib import Path

    import localserve

    package = Path(localserve.__file__).parent
    settings_tree = ast.parse((package / "settings.py").read_text())
    constants = {t.id for node in settings_tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                 for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(t, ast.Name) and t.id.isupper()}
    readers: dict[str, set[str]] = {name: set() for name in constants}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        part = parts[0]
        tree = settings_tree if path.name == "settings.py" and len(parts) == 1 else ast.parse(path.read_text())
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) else \
                node.attr if isinstance(node, ast.Attribute) else None
            if name in readers:
                readers[name].add(part)
    lonely = {name: sorted(parts) for name, parts in readers.items()
              if "cli" not in parts and "settings" not in parts and len(parts) < 2 and name not in NOT_MOVED_YET}
    assert lonely == {}, f"read by one part alone: move each beside its reader: {lonely}"
