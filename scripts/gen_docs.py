"""Generates docs/errors.md and docs/results.md from the source (tests/test_error_docs.py and
tests/test_result_docs.py keep them in step):

    python3 scripts/gen_docs.py errors > docs/errors.md
    python3 scripts/gen_docs.py results > docs/results.md
"""

from __future__ import annotations

import ast
import errno
import sys
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from iobench.errors import EXIT_NOT_FED, EXIT_REFUSED, EXIT_STDOUT_CLOSED, EXIT_USAGE, REFUSALS
from iobench.result import POINT_V1, READS, SCHEMA, Result
from iobench.result_fields import MOST

ROOT = Path(__file__).resolve().parent.parent

# ---- docs/errors.md

EXIT_CODES = {
    0: "done",
    EXIT_NOT_FED: "done, but the GPUs asked about (--gpus N) are not fed (only with --check); or your own code "
                  "(run --pipeline FILE.py:FUNC) raised: its traceback, then one line naming your file and line, the "
                  "result kept (complete: false)",
    EXIT_USAGE: "usage error: a bad option value, options that do not apply, bad input (UserError); also a standard "
                "output that cannot be written (full, an I/O error): never blamed on the storage",
    EXIT_REFUSED: "the environment refused: mount or path missing, read-only, full, over quota, permission "
                  "(EnvironmentRefused)",
    129: "interrupted by SIGHUP (the terminal closed): the result keeps what was measured (complete: false)",
    130: "interrupted by SIGINT (Ctrl-C): likewise; a stop signal while iobench is still starting ends it at once "
         "(nothing was done), one that comes once a run has finished (its verdict printed) is said and changes "
         "nothing",
    EXIT_STDOUT_CLOSED: "the reader of standard output left (`iobench run` piped into `head -1`): nothing more is "
                        "printed, the command still does its work (a run saves its result, reports and --json file), "
                        "no line",
    143: "interrupted by SIGTERM: likewise",
}


def catalogue() -> list[tuple[int, str, str]]:
    """Every one-line error iobench can raise, from its source: (exit code, message template, module). Messages
    built at run time show their parts in braces. No line numbers: the doc changes only when an error does."""
    trees = {p: ast.parse(p.read_text()) for p in sorted((ROOT / "iobench").rglob("*.py"))}
    codes = {"UserError": 2, "EnvironmentRefused": 3}
    changed = True
    while changed:  # subclasses of the error classes, in any module
        changed = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in codes:
                    for base in node.bases:
                        if isinstance(base, ast.Name) and base.id in codes:
                            codes[node.name] = codes[base.id]
                            changed = True
    out = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                call = node.exc
                name = call.func.id if isinstance(call.func, ast.Name) else None
                if name in codes:
                    text = _template(call.args[0]) if call.args else f"({name}: see its class in the module)"
                    out.append((codes[name], text, str(path.relative_to(ROOT))))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Refusal"
                  and len(node.args) == 3):  # a row of the command line's refusals (iobench/cli/refusals.py)
                out.append((2, _template(node.args[2]), str(path.relative_to(ROOT))))
    return sorted(set(out))


def _template(arg: ast.expr) -> str:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        # an f-string's parts are its literal text (str constants) and its {fields} (FormattedValue)
        return "".join(cast(str, v.value) if isinstance(v, ast.Constant)
                       else "{" + ast.unparse(cast(ast.FormattedValue, v).value) + "}"
                       for v in arg.values)
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        return _template(arg.left) + _template(arg.right)
    return "{" + ast.unparse(arg) + "}"


def errors_markdown() -> str:
    """docs/errors.md: the exit codes, then every error a user can meet with its code."""
    lines = ["# Errors and exit codes", "",
             "Generated from the source by `python3 scripts/gen_docs.py errors > docs/errors.md` (a test keeps it in "
             "step).",
             "Every error is one line on stderr, `iobench: error: MESSAGE`, never a traceback. Braces stand for",
             "the parts filled in at run time.", "", "| exit code | meaning |", "|---|---|"]
    lines += [f"| {code} | {text} |" for code, text in EXIT_CODES.items()]
    lines += ["", "Operating-system errors while reading or writing are named with what iobench was doing, the",
              "path and the reason; exit code 3 for "
              + ", ".join(sorted(errno.errorcode[e] for e in REFUSALS)) + ", else 2.", "",
              "| exit code | message | raised at |", "|---|---|---|"]
    for code, text, where in catalogue():
        cell = text.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {code} | {cell} | `{where}` |")
    return "\n".join(lines) + "\n"


# ---- docs/results.md

def field_rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    """The table's rows: every field of `model` with its description and range, computed ones (derived from the
    others when written) included, each model inside one after its row (a list's as `key[].`)."""
    rows = []
    fields = [(f.alias or name, f.annotation, f.description, _range(f)) for name, f in model.model_fields.items()]
    fields += [(c.alias or name, c.return_type, c.description, "") for name, c in model.model_computed_fields.items()]
    for key, ann, description, bounds in fields:
        sub = _model_in(ann)
        many = "list" in str(ann) and sub is not None
        rows.append(f"| `{prefix}{key}{'[]' if many else ''}` | {description} | {bounds} |")
        if sub is not None:
            rows += field_rows(sub, f"{prefix}{key}{'[]' if many else ''}.")
    return rows


def _range(field: Any) -> str:
    """A field's range as its rule sets it (result_fields._rule's JSON Schema bounds): "[0, 1e+15]", "(0, 1]",
    "1 to 2^63 - 1"; "" for a field without one."""
    found = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else _extra_in(field.annotation)
    if not found:
        return ""
    least, above, most = found.get("minimum", found.get("exclusiveMinimum")), "exclusiveMinimum" in found, \
        found.get("maximum")
    if most == MOST:
        return f"{least} to 2^63 - 1"
    return f"{'(' if above else '['}{least:g}, {most:g}]"


def _extra_in(ann: object) -> dict | None:
    """The bounds of a rule inside an annotation (`Rate | None`, `list[Rate]`, `list[tuple[Seconds, Count]]`: the
    first found)."""
    for meta in getattr(ann, "__metadata__", ()):
        if isinstance(getattr(meta, "json_schema_extra", None), dict):
            return meta.json_schema_extra
    for arg in getattr(ann, "__args__", ()) or ():
        if (found := _extra_in(arg)) is not None:
            return found
    return None


def _model_in(ann: object) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _model_in(arg)
        if found:
            return found
    return None


def results_markdown() -> str:
    """docs/results.md: every field of the result file with its description, computed ones included."""
    lines = [
        "# Result file fields",
        "",
        f"`iobench run` writes `result.json` (schema `{SCHEMA}`), atomically after every measured epoch.",
        "Generated from `iobench/result.py` by `python3 scripts/gen_docs.py results > docs/results.md`.",
        "Units: bytes are bytes; MB = 10^6 B; latencies in ms; rates per second of wall time.",
        "",
        f"Read back (`iobench report`, `compare`, `plan --result`) a result must be of a schema this iobench reads "
        f"({', '.join(f'`{v}`' for v in READS)}), hold no NaN or infinity anywhere (a figure that came out non-finite "
        "is written as null) and each figure within the range its row gives (`iobench schema` has the same bounds); "
        "else it is refused in one line naming the field.",
        "",
        "A `iobench.result/1` result is read under the names `/2` gives what it measured (`/1` named the raw baseline "
        "fio even where the AWS CRT's S3 client ran it): `settings.fio` as `settings.raw_baseline`, `baseline.fio[]` "
        "as `baseline.points[]` (" + ", ".join(f"`{a}` as `{b}`" for a, b in POINT_V1.items()) + "), "
        "`baseline.fio_version` as `baseline.tool_version` (`baseline.tool` \"fio\" where it had none).",
        "",
        "| field | meaning | range read back |",
        "|---|---|---|",
        *field_rows(Result),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    pages = {"errors": errors_markdown, "results": results_markdown}
    if len(sys.argv) != 2 or sys.argv[1] not in pages:
        sys.exit(f"usage: {sys.argv[0]} errors|results")
    sys.stdout.write(pages[sys.argv[1]]())
