"""The result's field types and the rules a result read back must hold.

Each type (Count, Rate, Fraction, ...) carries its check and its JSON Schema bounds. `Result.load` (report, compare,
plan) validates in the context LOADING: every number finite, every figure in its range, a schema version of READS.
A run's own figures are not checked as it builds them (a psutil share rounded to -0.1 must not stop a measurement);
the tests load back what runs write. Also the models' common base and why a file is not a usable result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

LOADING = "iobench.result: read back"
MOST = 2**63 - 1  # no counter a result holds (bytes, files, GPUs) goes past a signed 64-bit integer
LARGEST = 1e15  # no figure iobench measures reaches 10^15 of its unit (samples/s, MB/s, s, ms, B, x)
PCT_SLACK = 0.5  # psutil rounds each CPU share to 0.1 and a busy share is 100 minus two of them: -0.1 happens


def _shown(v: float) -> str:
    if isinstance(v, int) and abs(v) >= 10**15:
        return f"a {len(str(abs(v)))}-digit number"
    return repr(v)


def _rule(what: str, ok: Callable[[Any], bool], schema: dict[str, Any]) -> Any:
    """An annotation's check (with its JSON Schema bounds): `what` is the rule as the error says it."""
    def check(v: Any, info: ValidationInfo) -> Any:
        if info.context == LOADING and not ok(v):
            raise ValueError(f"is {_shown(v)}: {what}")
        return v
    return (AfterValidator(check), Field(json_schema_extra=schema))


def _at_least(least: int) -> Any:
    return _rule(f"a count, {least} to 2^63 - 1", lambda v: least <= v <= MOST, {"minimum": least, "maximum": MOST})


def _floats(kind: str, least: float, most: float = LARGEST, *, above: bool = False, why: str = "") -> Any:
    """A figure read back finite, over (or from, `above` False) `least`, at most `most`."""
    low = (lambda v: v > least) if above else (lambda v: v >= least)
    bound = {"exclusiveMinimum" if above else "minimum": least, "maximum": most}
    what = f"{kind} is within {'(' if above else '['}{least:g}, {most:g}]{why}"
    return _rule(what, lambda v: math.isfinite(v) and low(v) and v <= most, bound)


Count = Annotated[int, *_at_least(0)]  # samples, bytes, files, readers, epochs, GPUs fed
Positive = Annotated[int, *_at_least(1)]  # what others divide by or count from one: nodes, ranks, batch size
Rate = Annotated[float, *_floats("a rate", 0.0)]  # samples/s, MB/s, files/s, stat()s/s
Seconds = Annotated[float, *_floats("a time", 0.0)]  # seconds, and latencies in ms
Ratio = Annotated[float, *_floats("a ratio or size", 0.0)]  # speedup, efficiency, spread, mean bytes
PerGpu = Annotated[float, *_floats("a GPU's rate", 0.0, above=True)]  # samples/s one GPU consumes
Usable = Annotated[float, *_floats("a usable core count", 0.0, above=True)]  # affinity and cgroup quota
Used = Annotated[float, *_floats("a core count used", 0.0)]
Fraction = Annotated[float, *_floats("a fraction", 0.0, 1.0)]  # AU (the consumer caps it at 1), resident share
Target = Annotated[float, *_floats("an AU target", 0.0, 1.0, above=True)]
Percent = Annotated[float, *_floats("a percentage", -PCT_SLACK, 100.0 + PCT_SLACK,
                                    why=f" (0 to 100, +-{PCT_SLACK} of rounding)")]


def not_finite(data: object, at: str = "") -> str | None:
    """The path of the first NaN or infinity anywhere in `data` (JSON has neither, Python's json and pydantic take
    them), None when there is none."""
    if isinstance(data, float):
        return None if math.isfinite(data) else at
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list | tuple) else ()
    for k, v in items:
        if (found := not_finite(v, f"{at}.{k}" if at else str(k))) is not None:
            return found
    return None


def unusable(exc: ValidationError) -> str:
    """Why a file is not a usable result, in one line: the first problem's field path and what is wrong there."""
    first = exc.errors()[0]
    where = ".".join(str(k) for k in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    text = f"{where} {msg}" if first["type"] == "value_error" and where else f"{where}: {msg}" if where else msg
    more = exc.error_count() - 1
    return text + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


class Model(BaseModel):
    # a non-finite figure is written as null (JSON has no NaN): never a literal other JSON readers refuse; each model
    # built on first use (defer_build): a command that makes no result does not pay ~0.15 s of CPU to build them all
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="null", defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _derived_again(cls, data: object) -> object:
        """A result file carries the computed fields (they are serialised); loading derives them again rather than
        refusing them as extra (a stored copy could go stale: model_copy(update=...) skips validators)."""
        if isinstance(data, dict) and cls.model_computed_fields:
            data = {k: v for k, v in data.items() if k not in cls.model_computed_fields}
        return data
