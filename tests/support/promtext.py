"""A strict little reader of the Prometheus text format (0.0.4), for tests.

parse() raises ValueError on anything a scraper would reject or misread: a
sample line that is not `name{labels} value`, a sample before its family's
HELP and TYPE lines, a family described twice, a repeated sample, a histogram
whose buckets are not cumulative or whose +Inf bucket is not its count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE_LINE = re.compile(rf"^({NAME})(?:\{{(.*)\}})? (\S+)(?: -?\d+)?$")
LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
SUFFIXES = {"counter": ("_total", ""), "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count", ""), "gauge": ("",), "untyped": ("",)}

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    name: str
    help: str | None = None
    type: str | None = None
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)


class Scrape:
    def __init__(self, families: dict[str, Family]):
        self.families = families

    def value(self, name: str, **labels: str) -> float:
        """One sample's value. An absent sample of a counter or histogram is 0 (its series has not
        moved yet); an absent gauge, or a name no family has, is an error: a gauge that vanished
        must not read as "0 busy"."""
        want = tuple(sorted((k, str(v)) for k, v in labels.items()))
        family = _family_of(name, self.families)
        if family is None:
            raise KeyError(f"no metric family has a sample named {name}")
        if (name, want) in family.samples:
            return family.samples[(name, want)]
        if family.type in ("counter", "histogram"):
            return 0.0
        raise KeyError(f"{name}{dict(want)} is absent from the scrape ({family.type} {family.name})")

    def total(self, name: str, **labels: str) -> float:
        """Sum over the samples of name whose labels include the given ones."""
        want = {k: str(v) for k, v in labels.items()}
        return sum(value for family in self.families.values()
                   for (sample, pairs), value in family.samples.items()
                   if sample == name and want.items() <= dict(pairs).items())


def parse(text: str) -> Scrape:
    families: dict[str, Family] = {}
    for number, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        where = f"line {number}: {line!r}"
        if line.startswith("#"):
            _comment(line, families, where)
            continue
        match = SAMPLE_LINE.match(line)
        if not match:
            raise ValueError(f"not a sample line: {where}")
        name, label_text, value_text = match.groups()
        family = _family_of(name, families)
        if family is None or family.type is None or family.help is None:
            raise ValueError(f"sample before its HELP and TYPE lines: {where}")
        key = (name, _labels(label_text or "", where))
        if key in family.samples:
            raise ValueError(f"repeated sample: {where}")
        family.samples[key] = _value(value_text, where)
    for family in families.values():
        if family.type == "histogram":
            _check_histogram(family)
    return Scrape(families)


def _comment(line: str, families: dict[str, Family], where: str) -> None:
    parts = line.split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
        return                                  # a plain comment
    kind, name = parts[1], parts[2]
    if not re.fullmatch(NAME, name):
        raise ValueError(f"bad metric name: {where}")
    family = families.setdefault(name, Family(name))
    if family.samples:
        raise ValueError(f"{kind} after the family's samples: {where}")
    if kind == "HELP":
        if family.help is not None:
            raise ValueError(f"second HELP: {where}")
        family.help = parts[3] if len(parts) > 3 else ""
    else:
        if family.type is not None or len(parts) != 4 or parts[3] not in TYPES:
            raise ValueError(f"bad or second TYPE: {where}")
        family.type = parts[3]


def _family_of(sample: str, families: dict[str, Family]) -> Family | None:
    for name, family in families.items():
        for suffix in SUFFIXES.get(family.type or "untyped", ("",)):
            if sample == name + suffix:
                return family
    return None


def _labels(text: str, where: str) -> Labels:
    pairs, pos = [], 0
    while pos < len(text):
        match = LABEL_PAIR.match(text, pos)
        if not match:
            raise ValueError(f"bad labels: {where}")
        pairs.append((match.group(1), match.group(2).replace("\\n", "\n").replace('\\"', '"')
                      .replace("\\\\", "\\")))
        pos = match.end()
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"repeated label: {where}")
    return tuple(sorted(pairs))


def _value(text: str, where: str) -> float:
    try:
        return float({"+Inf": "inf", "-Inf": "-inf"}.get(text, text))
    except ValueError:
        raise ValueError(f"bad value: {where}") from None


def _check_histogram(family: Family) -> None:
    series: dict[Labels, list[tuple[float, float]]] = {}
    for (name, labels), value in family.samples.items():
        if name.endswith("_bucket"):
            le = dict(labels).get("le")
            if le is None:
                raise ValueError(f"{family.name}: bucket without le")
            rest = tuple(p for p in labels if p[0] != "le")
            series.setdefault(rest, []).append((_value(le, family.name), value))
    for rest, buckets in series.items():
        buckets.sort()
        counts = [count for _, count in buckets]
        if buckets[-1][0] != math.inf or counts != sorted(counts):
            raise ValueError(f"{family.name}{dict(rest)}: buckets not cumulative up to +Inf")
        if family.samples.get((family.name + "_count", rest)) != counts[-1]:
            raise ValueError(f"{family.name}{dict(rest)}: _count differs from the +Inf bucket")
        if (family.name + "_sum", rest) not in family.samples:
            raise ValueError(f"{family.name}{dict(rest)}: no _sum")
