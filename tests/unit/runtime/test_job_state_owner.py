"""A job's state has one owner (issue 30, item 6): its status, the tokens of its cache
(n_past), the token it decodes next and its slot's tokens move only through jobs.py's Job
methods; the runtime step calls them. kvslots.py alone also sets a slot's tokens: it decides
what a sequence keeps when a new job takes the slot."""

from __future__ import annotations

import ast
from pathlib import Path

import localserve

PACKAGE = Path(localserve.__file__).parent
JOB_STATE = {"status", "n_past", "next_token"}
OWNER = PACKAGE / "runtime" / "jobs.py"


def _moves(tree: ast.AST) -> list[str]:
    """Each assignment to a job's state field, and each slot.tokens grown, as `line: text`."""
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr in JOB_STATE and not _is_self(t.value):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
                if (isinstance(t, ast.Attribute) and t.attr == "tokens" and isinstance(t.value, ast.Attribute)
                        and t.value.attr == "slot"):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "extend")
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "tokens"
                and isinstance(node.func.value.value, ast.Attribute) and node.func.value.value.attr == "slot"):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _is_self(node: ast.AST) -> bool:
    """`self.status = ...` inside a class of its own (an HTTP writer, an error) is not a job's."""
    return isinstance(node, ast.Name) and node.id == "self"


def test_only_jobs_py_moves_a_job_s_state():
    moved = {}
    for path in sorted((PACKAGE / "runtime").glob("*.py")):
        if path == OWNER:
            continue
        found = _moves(ast.parse(path.read_text()))
        if found:
            moved[path.name] = found
    assert moved == {}, f"a job's state moved outside jobs.py: {moved}"


def test_the_check_sees_each_kind_of_move():
    for move in ("job.n_past += 1", "job.status = JobStatus.DECODING", "job.next_token = None",
                 "job.slot.tokens.append(t)", "job.slot.tokens = list(job.prompt)"):
        assert _moves(ast.parse(move)), move
    assert not _moves(ast.parse("self.status = 200\nn = job.n_past\nk = len(job.slot.tokens)"))
