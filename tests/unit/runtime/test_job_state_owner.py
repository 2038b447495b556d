"""A job's state has one owner (nano-vllm's rule; issues 30 and 48): every field of a Job, of the
records it keeps its state in, and of a Slot changes only through runtime/jobs.py's methods. The
parts of a step read them and return what they decided; the step applies it through those methods.

The fields are read from jobs.py itself, so a new one is guarded from the day it is added; a write
is any form Python has: an assignment (plain, augmented, annotated, in a tuple, a loop or a `with`
target), a `del`, an item or slice of the field, a mutating method called on it (`append`,
`popleft`…), `setattr`/`delattr`/`object.__setattr__`, or the object's `__dict__`. The whole
package and every test are read: tests build their jobs through the same methods."""

from __future__ import annotations

import ast
from pathlib import Path

import localserve

PACKAGE = Path(localserve.__file__).parent
TESTS = Path(__file__).resolve().parents[2]
OWNER = PACKAGE / "runtime" / "jobs.py"

MUTATORS = {"append", "extend", "insert", "pop", "popleft", "appendleft", "extendleft", "remove", "clear",
            "update", "add", "discard", "sort", "reverse", "setdefault", "rotate", "popitem"}
SETTERS = {"setattr", "delattr", "__setattr__", "__delattr__"}

# Other types with a field of the same name, written where they are (by the name they go by there):
# not a job's nor a slot's. Keep this short: a job or a slot never goes by these names.
NOT_A_JOB = {
    "request",      # GenerationRequest, SlotRequest (slot_state.py), a dialect's request: tokens, scope, cache_key
    "exchange",     # wire/, app.py: an HTTP exchange's scope
    "step",         # dialects/compaction.py: a compaction step's request
    "reply",        # dialects/request_cycle.py: a reply's request
    "generation",   # dialects/responses: a GenerationRequest being built
    "record",       # models/: a loaded model's record (last_used)
    "view",         # store/: a stored response's view (scope)
    "event",        # an event being shaped by a dialect
    "batch",        # engine/: a llama_batch (seq_id)
}


def fields() -> set[str]:
    """Every field of jobs.py's classes: dataclass fields, attributes set on self, properties."""
    names = set()
    for cls in (n for n in ast.parse(OWNER.read_text()).body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                names.add(node.name)
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
                names.add(node.attr)
    return names - {member.lower() for member in ("PREFILLING", "DECODING", "FINISHED")} | {"status"}


def _is_self(node: ast.AST) -> bool:
    """`self.status = ...` inside a class of its own (an HTTP writer, an error) is not a job's."""
    return isinstance(node, ast.Name) and node.id == "self"


def _guarded(node: ast.AST, guarded: set[str]) -> bool:
    """Whether `node` names a guarded field of something other than `self` or another type's name."""
    while isinstance(node, ast.Subscript):      # job.slot.tokens[3:] = ..., del slot.tokens[n:]
        node = node.value
    if not isinstance(node, ast.Attribute):
        return False
    if node.attr == "__dict__":
        return True
    receiver = node.value
    named = receiver.id if isinstance(receiver, ast.Name) else receiver.attr if isinstance(receiver, ast.Attribute) else ""
    return node.attr in guarded and not _is_self(receiver) and named not in NOT_A_JOB


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, (ast.Assign, ast.Delete)):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.comprehension)):
        found = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        found = [node.optional_vars]
    else:
        return []
    flat = []
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        elif isinstance(target, ast.Starred):
            found.append(target.value)
        else:
            flat.append(target)
    return flat


def writes(tree: ast.AST, guarded: set[str]) -> list[str]:
    """Each write to a guarded field, as `line: text`."""
    found = []
    for node in ast.walk(tree):
        hit = any(_guarded(target, guarded) for target in _targets(node))
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if isinstance(func, ast.Attribute) and name in MUTATORS:
                hit = _guarded(func.value, guarded)
            elif name in SETTERS and not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                                          and func.value.id == "monkeypatch"):
                field = next((a for a in node.args if isinstance(a, ast.Constant)), None)
                hit = field is None or field.value in guarded
        if hit:
            found.append(f"{getattr(node, 'lineno', '-')}: {ast.unparse(node).splitlines()[0]}")
    return found


def test_only_jobs_py_writes_a_job_s_or_a_slot_s_state():
    guarded = fields()
    written = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *TESTS.rglob("*.py")]):
        if path == OWNER or path == Path(__file__).resolve():
            continue
        found = writes(ast.parse(path.read_text()), guarded)
        if found:
            written[str(path)] = found
    assert written == {}, f"a job's or a slot's state written outside runtime/jobs.py: {written}"


def test_the_guard_knows_every_field():
    guarded = fields()
    assert {"status", "n_past", "next_token", "generated", "tokens", "kv_length", "scope", "job", "slot",
            "first_token", "parked", "forced", "spent", "unsent", "sent", "choice", "sample_worker",
            "image_in_parts", "checkpoint_at", "call_refused", "drafts", "progress", "clocks"} <= guarded


def test_the_guard_sees_each_form_of_write():
    guarded = fields()
    for move in ("job.progress.n_past += 1", "job.progress.status = JobStatus.DECODING", "job.n_past = 3",
                 "job.slot.tokens.append(t)", "job.slot.tokens = list(job.prompt)", "slot.tokens = []",
                 "del slot.tokens[keep:]", "slot.tokens[0] = 1", "slot.kv_length: int = 0",
                 "a, (job.clocks.first_token, b) = x", "*job.generated, = x", "job.forced.popleft()",
                 "job.budget.forced.extend(t)", "setattr(job, 'status', s)", "object.__setattr__(job, 'slot', s)",
                 "setattr(job, name, v)", "delattr(slot, 'job')", "job.__dict__['status'] = s",
                 "for job.progress.n_past in range(3): pass", "with x as job.choice: pass",
                 "[0 for slot.job in jobs]", "parked.job.slot = other", "jobs[0].progress.next_token = None"):
        assert writes(ast.parse(move), guarded), move
    for read in ("self.status = 200", "n = job.n_past", "k = len(job.slot.tokens)", "request.tokens = []", "step.request.cache_key = k",
                 "monkeypatch.setattr(module, 'LIMIT', 1)", "self.tokens.pop(0)", "x = job.generated[-1]"):
        assert not writes(ast.parse(read), guarded), read
