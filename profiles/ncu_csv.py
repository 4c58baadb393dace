"""Parse Nsight Compute CSV output (``--csv --page raw`` or ``--page details``) into one record per launch.

ncu prints its own ``==PROF==``/``==WARNING==``/``==ERROR==`` lines (and the profiled program's output)
into the same stream as the CSV, writes numbers with thousands separators and leaves ``no data``/``n/a``
in cells it could not fill. All of that is tolerated here so callers see clean numbers.

Metric keys are normalized so both pages can be read the same way:
- raw page: the ncu metric name itself (``gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed``);
- details page: ``<section>.<metric>`` in snake case (``gpu_speed_of_light_throughput.dram_throughput``),
  except metrics requested with ``--metrics`` which keep their ncu name (they contain ``__``).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

Value = float | str | None

# Columns that identify a launch rather than measure it (present on both pages).
IDENTITY_COLUMNS = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)
DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
_NOISE = re.compile(r"^\s*==[A-Z]+==")
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][+-]?\d+)?$")
_MISSING = {"", "no data", "n/a", "na", "nan", "-", "(!)", "not available"}


class NcuParseError(ValueError):
    """The text is not an ncu CSV report (or not one this parser understands)."""


class NcuRule(BaseModel):
    """A rule result of the details page (ncu's guidance text with its estimated speedup)."""

    section: str
    name: str
    type: str
    description: str
    speedup_type: str = ""
    speedup: float | None = None


class NcuLaunch(BaseModel):
    """One profiled kernel launch."""

    id: int
    kernel: str
    page: Literal["raw", "details"]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    metrics: dict[str, Value]
    units: dict[str, str]
    rules: list[NcuRule] = []

    def value(self, key: str) -> Value:
        return self.metrics.get(key)

    def number(self, key: str) -> float | None:
        value = self.metrics.get(key)
        return value if isinstance(value, float) else None


def normalize_name(name: str) -> str:
    """'L1/TEX Cache Throughput' -> 'l1_tex_cache_throughput'; '# SMs' -> 'sms'."""
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")


def details_key(section: str, metric: str) -> str:
    if "__" in metric:  # a metric requested by name with --metrics keeps that name
        return metric.strip()
    return f"{normalize_name(section)}.{normalize_name(metric)}"


def parse_value(cell: str) -> Value:
    """A number (separators removed) as float, None for ncu's empty markers, else the text."""
    text = cell.strip()
    if text.lower() in _MISSING:
        return None
    if _NUMBER.match(text) and any(ch.isdigit() for ch in text):
        return float(text.replace(",", ""))
    return text


def parse_dim3(cell: str) -> tuple[int, int, int]:
    """'(256, 1, 1)' -> (256, 1, 1); tolerates separators inside numbers ('(65,536, 1, 1)')."""
    parts = [p for p in re.split(r",\s+", cell.strip().strip("()[]")) if p.strip()]
    dims = []
    for part in parts:
        value = parse_value(part)
        if not isinstance(value, float):
            raise NcuParseError(f"cannot read a launch dimension from {cell!r}")
        dims.append(int(value))
    if not 1 <= len(dims) <= 3:
        raise NcuParseError(f"cannot read a launch dimension from {cell!r}")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def _csv_rows(text: str) -> list[list[str]]:
    """Rows of the CSV part of ncu's output: noise lines before, inside and after the table dropped."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.startswith('"ID"') or line.startswith("ID,"):
            start = i
            break
    if start is None:
        raise NcuParseError(
            'no ncu CSV header found (expected a line starting with "ID","Process ID"; '
            "was the report written with `ncu --csv --page raw|details`?)"
        )
    kept: list[str] = []
    pending = ""  # a record whose quoted field continues on the next line
    for line in lines[start:]:
        if pending:
            pending += "\n" + line
            if pending.count('"') % 2 == 0:
                kept.append(pending)
                pending = ""
            continue
        if _NOISE.match(line) or not line.strip():
            continue
        if not (line.startswith('"') or line.startswith("ID,")):
            continue  # the profiled program's own output
        if line.count('"') % 2:
            pending = line
            continue
        kept.append(line)
    return list(csv.reader(io.StringIO("\n".join(kept))))


def parse_ncu_csv(text: str) -> list[NcuLaunch]:
    """Every profiled launch in an ncu CSV report, in report order."""
    rows = _csv_rows(text)
    header = [h.strip() for h in rows[0]]
    if "Kernel Name" not in header:
        raise NcuParseError("the CSV header has no 'Kernel Name' column: not an ncu report")
    body = rows[1:]
    if all(col in header for col in DETAILS_COLUMNS):
        launches = _parse_details(header, body)
    else:
        launches = _parse_raw(header, body)
    if not launches:
        raise NcuParseError("the ncu report holds no profiled launch (did the -k filter match a kernel?)")
    return launches


def read_ncu_csv(path: str | Path) -> list[NcuLaunch]:
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise NcuParseError(f"cannot read {path}: {exc.strerror}") from None
    return parse_ncu_csv(text)


def _identity(record: dict[str, str], page: Literal["raw", "details"]) -> dict:
    try:
        launch_id = int(float(record.get("ID", "0").replace(",", "") or 0))
    except ValueError as exc:
        raise NcuParseError(f"bad launch ID {record.get('ID')!r}") from exc
    return {
        "id": launch_id,
        "kernel": record.get("Kernel Name", "").strip(),
        "page": page,
        "grid": parse_dim3(record.get("Grid Size", "") or "(0, 0, 0)"),
        "block": parse_dim3(record.get("Block Size", "") or "(0, 0, 0)"),
    }


def _parse_raw(header: list[str], body: list[list[str]]) -> list[NcuLaunch]:
    units_row: list[str] = []
    launches = []
    for row in body:
        if len(row) < len(IDENTITY_COLUMNS) or not any(cell.strip() for cell in row):
            continue  # blank, or a stray quoted line the profiled program printed
        if not row[0].strip():  # the units row has an empty ID
            units_row = row
            continue
        record = dict(zip(header, row, strict=False))
        metrics: dict[str, Value] = {}
        units: dict[str, str] = {}
        for i, name in enumerate(header):
            if name in IDENTITY_COLUMNS or i >= len(row):
                continue
            metrics[name] = parse_value(row[i])
            units[name] = units_row[i].strip() if i < len(units_row) else ""
        launches.append(NcuLaunch(**_identity(record, "raw"), metrics=metrics, units=units))
    return launches


def _parse_details(header: list[str], body: list[list[str]]) -> list[NcuLaunch]:
    by_id: dict[int, dict] = {}
    for row in body:
        if len(row) < len(IDENTITY_COLUMNS) or not any(cell.strip() for cell in row):
            continue
        record = dict(zip(header, row, strict=False))
        ident = _identity(record, "details")
        launch = by_id.setdefault(ident["id"], {**ident, "metrics": {}, "units": {}, "rules": []})
        section = record.get("Section Name", "")
        metric = record.get("Metric Name", "").strip()
        if metric:
            key = details_key(section, metric)
            launch["metrics"][key] = parse_value(record.get("Metric Value", ""))
            launch["units"][key] = record.get("Metric Unit", "").strip()
        elif record.get("Rule Name", "").strip():
            speedup = parse_value(record.get("Estimated Speedup", ""))
            launch["rules"].append(
                NcuRule(
                    section=section,
                    name=record["Rule Name"].strip(),
                    type=record.get("Rule Type", "").strip(),
                    description=record.get("Rule Description", "").strip(),
                    speedup_type=record.get("Estimated Speedup Type", "").strip(),
                    speedup=speedup if isinstance(speedup, float) else None,
                )
            )
    return [NcuLaunch(**fields) for fields in by_id.values()]
