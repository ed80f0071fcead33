"""The CSV export: one flat row per measured run (replay, training, mitigation) and per raw baseline point, every
figure as a number (not as the tables show it), for a spreadsheet or a script. Named csv_writer so that it is
never taken for the standard library's csv, which it uses."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from iobench.answer.rules import au_fraction, raw_validity
from iobench.answer.words import raw_tool
from iobench.report.facts import labels
from iobench.result import Latency, Result

VERDICT_COLUMNS = ("storage_samples_per_s", "storage_gpus_fed", "client_gpus_fed", "borderline", "limit")
CSV_COLUMNS = (
    "system", "created", "host", "mount", "fstype", "family", "remote", "dataset_files", "dataset_mean_bytes",
    "kind", "engine", "source", "order", "mitigation", "readers", "workers", "batch_size", "decode", "cache",
    "measures", "resident_before", "eviction", "complete", "samples", "bytes", "seconds", "samples_per_s", "mb_per_s",
    "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_p999_ms", "latency_max_ms", "latency_mean_ms",
    "open_p50_ms", "open_p99_ms", "decode_p50_ms", "cpu_busy_pct", "iowait_pct", "iobench_cores", "cpu_us_per_sample",
    "efficiency", "gpus", "consumer_rate", "au", "au_min", "delivered_per_s", "valid", "invalid_reason", "gpu", "model",
    "au_target", *(f"verdict_{k}" for k in VERDICT_COLUMNS),
)

# a run's fields that are columns under their own names
RUN_FIELDS = ("kind", "engine", "source", "order", "mitigation", "workers", "batch_size", "decode", "cache", "measures",
              "resident_before", "eviction", "complete", "samples", "bytes", "seconds", "samples_per_s", "mb_per_s",
              "cpu_us_per_sample", "efficiency", "gpus", "consumer_rate", "delivered_per_s", "valid", "invalid_reason")
_UNTIMED = Latency.model_construct(**dict.fromkeys(Latency.model_fields))  # type: ignore[arg-type]  # all empty


def csv_rows(results: Sequence[Result], names: Sequence[str] | None = None) -> list[dict[str, object]]:
    """One flat row per measured run (replay, training, mitigation), and one per point of the raw baseline (kind and
    engine the tool that ran: "fio" on files, "awscrt" on objects)."""
    rows: list[dict[str, object]] = []
    for r, n in zip(results, labels(results, names), strict=True):
        common = {"system": n, "created": r.created, "host": r.host.hostname, "mount": r.mount.path,
                  "fstype": r.mount.fstype, "family": r.mount.family, "remote": r.remote,
                  "dataset_files": r.dataset.files, "dataset_mean_bytes": r.dataset.mean_bytes,
                  "gpu": r.settings.gpu, "model": r.settings.model, "au_target": r.settings.au_target,
                  **{f"verdict_{k}": getattr(r.verdict, k, None) for k in VERDICT_COLUMNS}}
        for x in r.runs:
            opened = x.open_ms or _UNTIMED  # another pipeline timed no read
            rows.append({**common, **{k: getattr(x, k) for k in RUN_FIELDS}, "readers": x.concurrency,
                         **_latency(x.latency_ms or _UNTIMED), "open_p50_ms": opened.p50, "open_p99_ms": opened.p99,
                         "decode_p50_ms": x.decode_ms.p50 if x.decode_ms else None, "au": au_fraction(x.au),
                         "cpu_busy_pct": x.cpu.system_busy_pct, "iowait_pct": x.cpu.iowait_pct,
                         "iobench_cores": x.cpu.iobench_cores, "au_min": au_fraction(x.au_min)})
        for b in (r.baseline.points if r.baseline else []):
            rows.append({**common, "kind": raw_tool(r), "engine": raw_tool(r),
                         "source": "objects" if r.mount.objects else "files", "order": "shuffled",
                         "readers": b.concurrency, "cache": b.cache, "measures": "unknown", "complete": True,
                         "samples": b.samples, "bytes": b.bytes, "seconds": b.seconds, "samples_per_s": b.samples_per_s,
                         "mb_per_s": b.mb_per_s, **_latency(b.latency_ms), "cpu_us_per_sample": b.cpu_us_per_sample,
                         "valid": raw_validity(b) is None, "invalid_reason": raw_validity(b)})
    return rows


def _latency(lat: Latency) -> dict[str, object]:
    return {f"latency_{k}_ms": getattr(lat, k) for k in ("p50", "p90", "p99", "p999", "max", "mean")}


def render_csv(results: Sequence[Result], names: Sequence[str] | None = None) -> str:
    """CSV with CSV_COLUMNS, one row per run (see csv_rows); empty cells for what does not apply."""
    fh = io.StringIO(newline="")
    w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="raise")
    w.writeheader()
    for row in csv_rows(list(results), names):
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    return fh.getvalue()
