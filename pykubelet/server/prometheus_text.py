"""The Prometheus text format (version 0.0.4) exactly as the kubelet's Go client writes it.

prometheus_client's writer renames counters (it adds `_total` to a counter family's name and
writes Python's float spelling, `5.0` for Go's `5`), which is right for the series we define
ourselves but not for series named by someone else (the runtime): those keep their names here,
and their values are spelled as Go spells them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal

# What the kubelet's Go writer declares for this format (names needing no escaping, as here).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

# Names the classic text format writes unquoted; the kubelet's runtime uses only these.
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class Sample:
    label_values: tuple[str, ...]  # in the order of the family's label names
    value: float
    timestamp_ms: int | None = None  # None: the sample is of the moment of the scrape


@dataclass
class Family:
    name: str
    help: str
    type: str  # "counter" or "gauge"
    label_names: tuple[str, ...]
    samples: list[Sample] = field(default_factory=list)


def go_float(value: float) -> str:
    """`value` as Go's strconv.FormatFloat(value, 'g', -1, 64) spells it: the shortest digits that
    read back as the same float, in exponent form from 1e+06 up and below 1e-04."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    assert isinstance(exponent, int)  # finite: NaN and infinities are handled above
    point = len(digit_tuple) + exponent  # where the decimal point falls after the first `point` digits
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    sign = "-" if value < 0 else ""
    power = point - 1
    if power < -4 or power >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _escape(text: str, quoted: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quoted else text


def _sample_line(family: Family, sample: Sample, order: list[int]) -> str:
    labels = ",".join(f'{family.label_names[i]}="{_escape(sample.label_values[i], True)}"' for i in order)
    line = f"{family.name}{{{labels}}}" if labels else family.name
    line += " " + go_float(sample.value)
    if sample.timestamp_ms is not None:
        line += f" {sample.timestamp_ms}"
    return line + "\n"


def render(families: list[Family]) -> str:
    """The page: families by name, each one's samples by their label values with the labels in
    name order (as the Go registry sorts them); families without samples are left out."""
    out: list[str] = []
    for family in sorted(families, key=lambda f: f.name):
        if not family.samples:
            continue
        order = sorted(range(len(family.label_names)), key=lambda i: family.label_names[i])
        out.append(f"# HELP {family.name} {_escape(family.help, False)}\n# TYPE {family.name} {family.type}\n")
        for sample in sorted(family.samples, key=lambda s: [s.label_values[i] for i in order]):
            out.append(_sample_line(family, sample, order))
    return "".join(out)
