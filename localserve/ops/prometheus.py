"""Prometheus metric types and their text exposition, knowing nothing of localserve.

Counters kept as things happen, gauges and counters read at scrape time from a callable,
histograms with fixed buckets (a scrape costs the same however long the server has run),
and a Registry that renders them all in registration order.

Format: https://prometheus.io/docs/instrumenting/exposition_formats/ (text 0.0.4).
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any, Callable, Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LabelValues = tuple[str, ...]


# ---- the metric types ------------------------------------------------------------

class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()):
        self.name = name
        self.help = help
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, Any]) -> LabelValues:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def samples(self) -> list[tuple[str, LabelValues, tuple[tuple[str, str], ...], float]]:
        """(name suffix, label values, extra labels, value) for each sample line."""
        raise NotImplementedError


class Counter(_Metric):
    """A value that only goes up; one per combination of label values."""
    kind = "counter"

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()):
        super().__init__(name, help, labels)
        self._values: dict[LabelValues, float] = {} if self.label_names else {(): 0.0}

    def inc(self, amount: float = 1, **labels: Any) -> None:
        if amount < 0:
            raise ValueError("a counter cannot go down")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: Any) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples_by_key(self) -> list[tuple[LabelValues, float]]:
        with self._lock:
            return sorted(self._values.items())

    def samples(self):
        items = self.samples_by_key()
        return [("_total" if not self.name.endswith("_total") else "", key, (), value) for key, value in items]


class Gauge(_Metric):
    """A value read at scrape time from a callable (None = nothing to report yet)."""
    kind = "gauge"

    def __init__(self, name: str, help: str, read: Callable[[], float | None]):
        super().__init__(name, help)
        self.read = read

    def samples(self):
        value = self.read()
        return [] if value is None else [("", (), (), float(value))]


class LabeledGauge(_Metric):
    """Values read at scrape time, one per combination of label values ({(value, ...): number})."""
    kind = "gauge"

    def __init__(self, name: str, help: str, labels: Iterable[str], read: Callable[[], dict[LabelValues, float]]):
        super().__init__(name, help, labels)
        self.read = read

    def samples(self):
        return [("", tuple(str(v) for v in key), (), float(value)) for key, value in sorted(self.read().items())]


class ReadCounter(Gauge):
    """A counter someone else keeps (e.g. the prompt cache's hits), read at scrape time."""
    kind = "counter"


class Histogram(_Metric):
    """Observations counted into fixed cumulative buckets, with their sum and count."""
    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Iterable[float], labels: Iterable[str] = ()):
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(float(b) for b in buckets))
        if not self.buckets or len(set(self.buckets)) != len(self.buckets):
            raise ValueError(f"{name}: buckets must be distinct and not empty")
        self._series: dict[LabelValues, list] = {}    # key → [bucket counts..., +Inf count, sum]

    def observe(self, value: float, **labels: Any) -> None:
        if math.isnan(value):
            return
        key = self._key(labels)
        index = bisect.bisect_left(self.buckets, value)   # first bucket with value <= bound
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = [0] * (len(self.buckets) + 1) + [0.0]
            series[index] += 1
            series[-1] += value

    def count(self, **labels: Any) -> int:
        with self._lock:
            series = self._series.get(self._key(labels))
            return sum(series[:-1]) if series else 0

    def samples(self):
        with self._lock:
            snapshot = sorted((key, list(series)) for key, series in self._series.items())
        out = []
        for key, series in snapshot:
            cumulative = 0
            for bound, n in zip(self.buckets + (math.inf,), series[:-1]):
                cumulative += n
                out.append(("_bucket", key, (("le", _number(bound)),), cumulative))
            out.append(("_sum", key, (), series[-1]))
            out.append(("_count", key, (), cumulative))
        return out


class Registry:
    """The metrics of one process, rendered in registration order."""

    def __init__(self):
        self._metrics: dict[str, _Metric] = {}

    def _register(self, metric: _Metric) -> Any:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} is already registered")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help: str, labels: Iterable[str] = ()) -> Counter:
        return self._register(Counter(name, help, labels))

    def histogram(self, name: str, help: str, buckets: Iterable[float], labels: Iterable[str] = ()) -> Histogram:
        return self._register(Histogram(name, help, buckets, labels))

    def gauge(self, name: str, help: str, read: Callable[[], float | None]) -> Gauge:
        return self._register(Gauge(name, help, read))

    def labeled_gauge(self, name: str, help: str, labels: Iterable[str],
                      read: Callable[[], dict[LabelValues, float]]) -> LabeledGauge:
        return self._register(LabeledGauge(name, help, labels, read))

    def read_counter(self, name: str, help: str, read: Callable[[], float | None]) -> ReadCounter:
        return self._register(ReadCounter(name, help, read))

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.append(f"# HELP {metric.name} {_escape_help(metric.help)}")
            lines.append(f"# TYPE {metric.name} {metric.kind}")
            for suffix, key, extra, value in metric.samples():
                pairs = list(zip(metric.label_names, key)) + list(extra)
                labels = "{" + ",".join(f'{n}="{_escape_label(v)}"' for n, v in pairs) + "}" if pairs else ""
                lines.append(f"{metric.name}{suffix}{labels} {_number(value)}")
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
