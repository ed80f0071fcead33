"""Results read back (`iobench report`, `compare`, `plan --result`) are validated on load: every number
finite, a schema version this iobench reads, every figure in its range; a file that is not usable is one line, exit
2, naming the field and what is wrong, never a traceback. `plan` never prints a figure from an absurd input. What
iobench itself writes still loads."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import pytest
from conftest import iobench, tree_hashes

from iobench.errors import UserError
from iobench.report import load_results
from iobench.result import READS, SCHEMA, Result
from iobench.safefs import read_input

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "reports" / "example").glob("*/result.json"))
EXAMPLE = EXAMPLES[0]


def _one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def _tampered(tmp_path: Path, edit, name: str = "r.json") -> Path:
    """The example result with `edit(data)` applied, written as Python's json writes it (NaN and Infinity as the
    literals Python's json and pydantic take)."""
    data = json.loads(EXAMPLE.read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _set(key_path: str, value):
    def edit(data):
        *parents, last = key_path.split(".")
        node = data
        for k in parents:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[int(last) if isinstance(node, list) else last] = value
    return edit


def _first_cold(data) -> int:
    return next(i for i, r in enumerate(data["runs"]) if r["cache"] == "cold" and r["valid"])


# ------------------------------------------------------------------------------------- not a number: report, compare

def test_a_nan_in_a_result_is_one_line_for_report_and_compare(tmp_path):
    k = _first_cold(json.loads(EXAMPLE.read_text()))
    bad = _tampered(tmp_path, _set(f"runs.{k}.samples_per_s", math.nan))
    assert "NaN" in bad.read_text()
    want = (f"iobench: error: {bad} is not a usable iobench result: runs.{k}.samples_per_s is not a finite number "
            "(NaN or infinity: iobench never writes one)")
    assert _one_line_error(iobench("report", str(bad), "--md", str(tmp_path / "r.md"))) == want
    assert not (tmp_path / "r.md").exists()
    assert _one_line_error(iobench("compare", str(EXAMPLE), str(bad), "--md", str(tmp_path / "c.md"))) == want


@pytest.mark.parametrize(("where", "literal"), [
    ("verdict.storage_samples_per_s", "Infinity"), ("runs.0.latency_ms.p99", "-Infinity"),
    ("runs.0.timeline.1.0", "NaN"), ("dataset.params.seed", "NaN"), ("runs.0.efficiency", "1e999")])
def test_no_non_finite_number_loads_wherever_it_is(tmp_path, where, literal):
    path = _tampered(tmp_path, _set(where, "@@"))
    path.write_text(path.read_text().replace('"@@"', literal))
    with pytest.raises(UserError) as e:
        load_results([path])
    assert str(e.value) == (f"{path} is not a usable iobench result: {where} is not a finite number (NaN or "
                            "infinity: iobench never writes one)")


def test_the_writer_never_writes_a_non_finite_number(tmp_path):
    """A figure that came out infinite is written as null (JSON has no infinity): an optional one then reads back
    as absent, a required one makes the file refused in one line, never a literal NaN."""
    r = Result.load(EXAMPLE)
    r.runs[0].efficiency = math.inf
    r.runs[1].samples_per_s = math.nan
    r.save(tmp_path / "result.json")
    text = (tmp_path / "result.json").read_text()

    def refuse(literal: str) -> None:
        raise AssertionError(f"the writer wrote {literal}")

    data = json.loads(text, parse_constant=refuse)
    assert data["runs"][0]["efficiency"] is None and data["runs"][1]["samples_per_s"] is None
    with pytest.raises(UserError, match=r"is not a usable iobench result: runs\.1\.samples_per_s: Input should be a "
                                        r"valid number"):
        load_results([tmp_path])


# ------------------------------------------------------------------------------------------------- schema versions

def test_a_result_of_an_unknown_schema_is_refused_naming_both(tmp_path):
    bad = _tampered(tmp_path, _set("schema", "iobench.result/99"))
    assert READS == ("iobench.result/1", SCHEMA) and SCHEMA == "iobench.result/2"
    want = (f"iobench: error: {bad} is not a usable iobench result: schema is 'iobench.result/99': this iobench "
            "reads iobench.result/1, iobench.result/2 (a result of another version needs the iobench that wrote it)")
    assert _one_line_error(iobench("report", str(bad), "--md", str(tmp_path / "r.md"))) == want
    # refused before its fields: another version's fields are not this one's
    newer = _tampered(tmp_path, lambda d: d.update(schema="iobench.result/3", brand_new={"x": 1}), "n.json")
    with pytest.raises(UserError, match="schema is 'iobench.result/3'"):
        load_results([newer])


# ------------------------------------------------------------------------------------------------- plausible ranges

@pytest.mark.parametrize(("where", "value", "why"), [
    ("runs.0.samples_per_s", -5.0, "is -5.0: a rate is within [0, 1e+15]"),
    ("runs.0.mb_per_s", 1e300, "is 1e+300: a rate is within [0, 1e+15]"),
    ("verdict.client_gpus_fed", 10**300, "is a 301-digit number: a count, 0 to 2^63 - 1"),
    ("runs.0.bytes", -1, "is -1: a count, 0 to 2^63 - 1"),
    ("runs.0.seconds", -0.5, "is -0.5: a time is within [0, 1e+15]"),
    ("runs.0.resident_before", 1.5, "is 1.5: a fraction is within [0, 1]"),
    ("runs.0.cpu.system_busy_pct", 180.0, "is 180.0: a percentage is within [-0.5, 100.5] (0 to 100, +-0.5 of "
                                           "rounding)"),
    ("settings.rate_per_gpu", 0.0, "is 0.0: a GPU's rate is within (0, 1e+15]"),
    ("settings.au_target", 0.0, "is 0.0: an AU target is within (0, 1]"),
    ("host.cpus_usable", 0.0, "is 0.0: a usable core count is within (0, 1e+15]"),
    ("settings.batch_size", 0, "is 0: a count, 1 to 2^63 - 1"),
    ("dataset.mean_bytes", -110000.0, "is -110000.0: a ratio or size is within [0, 1e+15]"),
])
def test_figures_out_of_their_range_are_refused_with_the_field(tmp_path, where, value, why):
    path = _tampered(tmp_path, _set(where, value))
    with pytest.raises(UserError) as e:
        load_results([path])
    assert str(e.value) == f"{path} is not a usable iobench result: {where} {why}"


def test_au_reaches_one_at_most_as_the_consumer_counts_it(tmp_path):
    """AU = compute / wall capped at 1 by the consumer (iobench/gpu/consumer.py): 1.0 loads, more does not."""
    k = next(i for i, r in enumerate(json.loads(EXAMPLE.read_text())["runs"]) if r.get("au") is not None)
    assert load_results([_tampered(tmp_path, _set(f"runs.{k}.au", 1.0))])[0].runs[k].au == 1.0
    with pytest.raises(UserError, match=rf"runs\.{k}\.au is 1\.0001: a fraction is within \[0, 1\]"):
        load_results([_tampered(tmp_path, _set(f"runs.{k}.au", 1.0001))])


def test_a_rounded_cpu_share_iobench_writes_still_loads(tmp_path):
    """psutil rounds each share to 0.1: 100 - idle - iowait can be -0.1 in a result iobench wrote."""
    path = _tampered(tmp_path, _set("runs.0.cpu.system_busy_pct", -0.1))
    assert load_results([path])[0].runs[0].cpu.system_busy_pct == -0.1


def test_the_first_problem_is_named_with_how_many_more(tmp_path):
    def edit(data):
        data["runs"][0]["samples"] = -1
        data["runs"][0]["mb_per_s"] = -1
        data["runs"][1]["seconds"] = -1
    with pytest.raises(UserError) as e:
        load_results([_tampered(tmp_path, edit)])
    assert str(e.value).endswith("runs.0.samples is -1: a count, 0 to 2^63 - 1 (and 2 more problems)")


def test_what_iobench_wrote_still_loads():
    for path in EXAMPLES:
        r = load_results([path])[0]
        assert r.schema_ in READS and r.runs
    assert load_results([EXAMPLE.parent])[0].created == Result.load(EXAMPLE).created


# ------------------------------------------------------------------------------------------ plan: absurd inputs

def test_plan_of_a_tampered_result_prints_no_absurd_figure(tmp_path):
    k = _first_cold(json.loads(EXAMPLE.read_text()))
    plan = ("plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50")
    negative = _tampered(tmp_path, _set(f"runs.{k}.samples_per_s", -5.0), "neg.json")
    err = _one_line_error(iobench(*plan, "--result", str(negative)))
    assert err == (f"iobench: error: {negative} is not a usable iobench result: runs.{k}.samples_per_s is -5.0: a rate "
                   "is within [0, 1e+15]")
    huge = _tampered(tmp_path, _set("verdict.client_gpus_fed", 10**300), "gpus.json")
    assert "verdict.client_gpus_fed is a 301-digit number" in _one_line_error(iobench(*plan, "--result", str(huge)))

    def absurd(data):
        for r in data["runs"]:
            r["samples_per_s"] = 1e14  # in range read back; 2.4e10 GPUs
    far = _tampered(tmp_path, absurd, "far.json")
    err = _one_line_error(iobench(*plan, "--result", str(far)))
    assert err.startswith("iobench: error: plan: ") and "not plausible" in err and "10,000,000" in err, err
    assert len(err) < 400  # no 300-digit figure


def test_plan_refuses_an_implausible_gpu_count_given_to_it():
    err = _one_line_error(iobench("plan", "--gpu", "h200", "--gpus", str(10**12), "--model", "resnet50"))
    assert err == ("iobench: error: plan: 1,000,000,000,000 GPUs is more than 10,000,000 (more than any cluster "
                   "holds): not a plausible plan")


def test_a_report_whose_what_ifs_no_plan_would_print_still_renders():
    """A run with a tiny per-GPU rate (--rate 0.001) asks for more GPUs than plan prints: the report's what-ifs are
    left out, the report is written."""
    from iobench.report.markdown import render_markdown

    r = Result.load(EXAMPLE)
    r.settings.rate_per_gpu = 0.001
    text = render_markdown([r])
    assert text.startswith("#") and "What-ifs" not in text


def _special_input(tmp_path: Path, kind: str) -> Path:
    """What a user may give for a result by mistake: a FIFO (opening it would block), /dev/zero (it never ends),
    a 100 MB file (sparse: a test need not write it)."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo.json")
        return tmp_path / "fifo.json"
    if kind == "zero":
        return Path("/dev/zero")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(100_000_000)
    return big


SAID = {"fifo": "{p} is a FIFO, not a regular file: give {what} file",
        "zero": "{p} is a device file, not a regular file: give {what} file",
        "big": "{p} holds 100.00 MB: too big to be {what} file (at most 64 MiB is read)"}


@pytest.mark.parametrize("kind", ["fifo", "zero", "big"])
@pytest.mark.parametrize("cmd", ["report", "compare", "plan", "run --workload"])
def test_an_input_that_is_not_a_small_regular_file_is_refused_unread(tmp_path, cmd, kind):
    special = _special_input(tmp_path, kind)
    (tmp_path / "a.json").write_bytes(EXAMPLE.read_bytes())
    argv = {"report": ["report", str(special)], "compare": ["compare", "a.json", str(special)],
            "plan": ["plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--result", str(special)],
            "run --workload": ["run", "--mount", str(tmp_path), "--workload", str(special)]}[cmd]
    before = tree_hashes(tmp_path)
    proc = iobench(*argv, cwd=tmp_path, timeout=30)  # a FIFO opened would block: the time-out fails the test
    what = "a workload" if cmd == "run --workload" else "an iobench result"
    assert _one_line_error(proc) == "iobench: error: " + SAID[kind].format(p=special, what=what)
    assert tree_hashes(tmp_path) == before and (kind != "fifo" or stat.S_ISFIFO(os.lstat(special).st_mode))


def test_an_input_is_read_no_further_than_its_bound_whatever_its_size_says():
    """/proc/self/maps says 0 bytes, and holds more than 16: the reading stops at the bound."""
    with pytest.raises(UserError, match=r"^/proc/self/maps holds over 16 B: too big to be a test input file"):
        read_input(Path("/proc/self/maps"), "a test input", limit=16)
    assert read_input(EXAMPLE, "an iobench result") == EXAMPLE.read_bytes()
