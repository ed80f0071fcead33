"""How numbers and names read in every report (HTML, Markdown, the terminal summary): one home for each format."""

from __future__ import annotations

from iobench.answer.words import loader_words
from iobench.result import Result, Run, Verdict


def num(x: float | None, digits: int = 0) -> str:
    """1,234 (digits=0), or 1,234.5; a small fraction keeps one decimal (2.5 rather than 2)."""
    if x is None:
        return "-"
    if digits == 0 and abs(x) < 10 and x != int(x):
        return f"{x:,.1f}"
    return f"{x:,.{digits}f}"


def ms(x: float | None) -> str:
    """A latency in ms: 3 decimals under 10 ms (sub-millisecond figures matter), one above."""
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:,.1f}"


def short(v: float) -> str:
    """Axis tick text: 12k, 1.5M, 0.25."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 1:
        return f"{v:,.0f}" if v == int(v) else f"{v:.3g}"
    return f"{v:.3g}"


def gb(b: float) -> str:
    return f"{b / 1e9:,.2f} GB"


readers = loader_words  # '4 threads' or '4 DataLoader workers': its one home is answer/words.py


def engine(r: Run) -> str:
    """The engine as the tables name it: 'threads', 'DataLoader', 'decode DataLoader', with a packed source; a
    training run through another pipeline than raw: that pipeline ('torchvision', 'dali', 'train.py:loader')."""
    if r.engine == "pipeline":
        return r.pipeline or "pipeline"
    e = "threads" if r.engine == "threads" else ("decode " if r.decode else "") + "DataLoader"
    if r.source != "files":
        e += f" ({r.source})"
    return e


def when(ts: str | None) -> str:
    return ts.replace("T", " ") if ts else "-"


def gpu_name(v: Verdict | None, result: Result) -> str:
    g = (v.gpu if v and v.gpu else None) or result.settings.gpu or "GPU"
    return g.upper()


def model_name(v: Verdict | None, result: Result) -> str:
    return (v.model if v and v.model else None) or result.settings.model or "the model"
