"""An object's members as GBNF, for schema.py's GrammarBuilder (`rules`: whose add_rule and
literal name the rules): the required members in order, the optional ones each only after the
ones before it, and a key that is none of the declared names for additional properties."""

from __future__ import annotations

from .gbnf import KEY_CHARS, SchemaError, char_class, subtract
from .limits import MAX_SCHEMA_KEY_LENGTH


def object_members(rules, hint: str, req: list[str], opt: list[str], extra: str | None) -> str:
    """The object's body from its members' rules: `req` required, `opt` optional, `extra` the rule
    of an additional member (None: no others)."""
    tail = f' ( ws "," ws {extra} )*' if extra else ""
    if req:
        body = ' ws "," ws '.join(req) + "".join(f' ( ws "," ws {o} )?' for o in opt)
        return f'"{{" ws {body}{tail} ws "}}"'
    if not opt and not extra:
        return '"{" ws "}"'
    alts, rest = [], tail  # rest: what may follow opt[i], each member led by its comma
    for i in reversed(range(len(opt))):
        alts.insert(0, f"{opt[i]}{rest}")
        if i:
            rest = " " + rules.add_rule(f"{hint}-rest", f'( ws "," ws {opt[i]} )?{rest}')
    if extra:
        alts.append(f"{extra}{tail}")
    return f'"{{" ws ( ( {" | ".join(alts)} ) ws )? "}}"'


def key_not_in(rules, names: list[str], path: str) -> str:
    """A key that is none of ``names``: unescaped characters only, so it reads as written."""
    trie: dict = {}
    for name in names:
        if len(name) > MAX_SCHEMA_KEY_LENGTH:     # the rule nests a group per character
            raise SchemaError(f"{path}: a property name longer than {MAX_SCHEMA_KEY_LENGTH} characters beside "
                              f"additional properties is not supported (MAX_SCHEMA_KEY_LENGTH)")
        if not any(c in '"\\' or ord(c) < 0x20 for c in name):  # no plain key can equal it
            node = trie
            for c in name:
                node = node.setdefault(c, {})
            node[""] = {}
    if not trie:
        return "string"

    def walk(node: dict) -> str:
        chars = sorted(c for c in node if c)
        others = subtract(KEY_CHARS, [(ord(c), ord(c)) for c in chars])
        alts = [f'{char_class(others)} keychar* "\\""'] + [f"{rules.literal(c)} {walk(node[c])}" for c in chars]
        return "( " + " | ".join(alts + ['"\\""'] * ("" not in node)) + " )"

    return rules.add_rule("key", '"\\"" ' + walk(trie))
