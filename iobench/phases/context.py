"""What every phase of one measured run shares (`RunContext`): the dataset, the settings, the result and where it
is saved, the terminal."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iobench.dataset import Manifest
from iobench.result import Result, Run, Settings
from iobench.ui import UI


@dataclass
class RunContext:
    """What every phase of one measured run shares: the dataset, the settings, the result, where it is saved (after
    each record: an interrupted run keeps what it measured) and the terminal."""

    manifest: Manifest
    settings: Settings
    result: Result
    path: Path
    ui: UI

    def save(self) -> None:
        self.result.save(self.path)

    def record(self, *runs: Run) -> None:
        """Append measured runs to the result and save it at once."""
        self.result.runs.extend(runs)
        self.save()

    def kept(self) -> str:
        return f"kept what was measured in {self.path}"
