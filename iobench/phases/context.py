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

    def kept_epochs(self) -> str:
        """`kept 2 measured epochs and the partial one it stopped in (complete: false) in PATH`: the epochs of the
        result, the one an interruption cut short said as such."""
        whole = sum(r.complete for r in self.result.runs)
        partial = len(self.result.runs) - whole
        said = [f"{whole} measured epoch{'s' if whole != 1 else ''}"] if whole else []
        if partial:
            said.append(("the partial one" if whole else "the partial epoch") + " it stopped in (complete: false)"
                        if partial == 1 else f"{partial} partial epochs (complete: false)")
        return f"kept {' and '.join(said) or 'no epoch'} in {self.path}"
