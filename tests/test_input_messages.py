"""Bad input a careful user tried, each made for real, each answered in one clear line with the right exit code:
URLs and endpoints, a bucket's URL given as a folder, a throttling server's status, a dataset too small for the
sweep, an unreadable dataset, an interrupted run's kept epochs, a 40-column terminal's table."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import iobench
from rich.console import Console

from iobench.phases.runner import RunContext
from iobench.report.facts import runs_table
from iobench.result import Result
from iobench.ui import UI, fit

GOLDEN = Path(__file__).resolve().parent / "data" / "golden" / "local.json"
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 16
RUN = ("--engine", "threads", "--no-fio", "--no-metadata", "--cache", "warm")


def _line(proc: subprocess.CompletedProcess, code: int) -> str:
    """The one error line, the last on stderr (what the run said before it, a scan's line, may precede it)."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("iobench:")]
    assert len(lines) == 1 and lines[0].startswith("iobench: error: "), proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == lines[0]
    return lines[0].removeprefix("iobench: error: ")


def test_a_backslash_in_the_url_prefix_is_named_as_such(tmp_path: Path) -> None:
    line = _line(iobench("gen", "--url", "s3://bucket/a\\b", "--files", "5", cwd=tmp_path), 2)
    assert line == "--url 's3://bucket/a\\b': its prefix holds a backslash: separate its parts with / (s3://BUCKET/a/b)"


@pytest.mark.parametrize("endpoint, said", [
    ("http://127.0.0.1:99999", "its port '99999' is not a port number (1-65535)"),
    ("http://127.0.0.1:9x", "its port '9x' is not a number"),
    ("http://127.0.0.1:8333/bucket", "an endpoint is http(s)://HOST[:PORT], with no path, query or fragment (the "
                                     "bucket goes in --url s3://BUCKET/PREFIX)"),
    ("http://127.0.0.1:8333?region=x", "an endpoint is http(s)://HOST[:PORT], with no path, query or fragment"),
])
def test_an_endpoint_with_a_bad_port_a_path_or_a_query_is_refused(tmp_path: Path, endpoint: str, said: str) -> None:
    line = _line(iobench("gen", "--url", "s3://bucket/p", "--endpoint-url", endpoint, "--files", "5", cwd=tmp_path), 2)
    assert line.startswith(f"--endpoint-url {endpoint!r}: {said}")
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint}
    line = _line(iobench("gen", "--url", "s3://bucket/p", "--files", "5", cwd=tmp_path, env=env), 2)
    assert line.startswith(f"AWS_ENDPOINT_URL {endpoint!r}: {said}")


@pytest.mark.parametrize("args", [("run", "--mount", "s3://bucket"), ("run", "--dataset", "s3://bucket/x"),
                                  ("gen", "--mount", "s3:/bucket"), ("clean", "--mount", "s3://bucket")])
def test_a_bucket_url_given_as_a_folder_is_said_to_be_a_url(tmp_path: Path, args: tuple[str, ...]) -> None:
    """As a path, s3://bucket was the folder s3:/bucket, reported missing (a slash silently dropped)."""
    line = _line(iobench(*args, cwd=tmp_path), 2)
    assert line == f"{args[1]} '{args[2]}' is a URL: {args[1]} takes a folder; object storage is --url s3://BUCKET/PREFIX"
    assert list(tmp_path.iterdir()) == []


class _Throttling(BaseHTTPRequestHandler):
    """A server answering every request 503 with no body, as a throttling S3 answers a HEAD."""

    def _answer(self) -> None:
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET = do_PUT = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def throttling() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Throttling)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_throttling_servers_status_is_said_once(tmp_path: Path, throttling: str) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_MAX_ATTEMPTS": "1"}
    line = _line(iobench("gen", "--url", "s3://bucket/p", "--endpoint-url", throttling, "--files", "5",
                         cwd=tmp_path, env=env), 3)
    assert f"at {throttling}: the server is throttling requests (503): " in line, line


def test_a_tree_too_small_is_advised_a_bigger_dataset_not_files(tmp_path: Path) -> None:
    """--files shapes a generated dataset and is refused with --dataset: the advice for a tree is its size."""
    (tmp_path / "one" / "c").mkdir(parents=True)
    (tmp_path / "one" / "c" / "a.jpg").write_bytes(JPEG)
    line = _line(iobench("run", "--dataset", str(tmp_path / "one"), *RUN, "--threads", "2",
                         "--out", str(tmp_path / "out")), 2)
    assert line == ("1 file gives 2 threads 0.5 samples each, fewer than the 10 a run needs to count: give a dataset "
                    "of 20 files or more")
    assert not (tmp_path / "out").exists()


def test_too_few_files_are_refused_before_measuring(tmp_path: Path) -> None:
    """300 files in batches of 256: 2 batches, at most 1 per worker. Known before anything is read: refused in
    one line with the --files that gives each reader 10 batches, and nothing measured (no rate judged: not quiet)."""
    pytest.importorskip("torch")  # DataLoader workers
    proc = iobench("run", "--mount", str(tmp_path), "--out", str(tmp_path / "out"), "--files", "300", "--engine",
                   "dataloader", "--epochs", "1", "--no-metadata", "--workers", "1,2", "--batch-size", "256",
                   "--cache", "cold", "--no-fio")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr  # before the dataset is made
    assert proc.stderr.startswith("iobench: error: 300 files give 2 DataLoader workers 1.0 batches of 256 each, fewer "
                                  "than the 10 a run needs to count: give --files 5,120 or more"), proc.stderr
    assert not (tmp_path / "out" / "result.json").exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_an_unreadable_dataset_root_is_said_unreadable_not_its_marker(tmp_path: Path) -> None:
    """Root without CAP_DAC_OVERRIDE/READ_SEARCH, as any user, on a real chmod 000 tree."""
    tree = tmp_path / "tree"
    (tree / "c").mkdir(parents=True)
    (tree / "c" / "a.jpg").write_bytes(JPEG)
    os.chown(tree, 12345, 12345)
    tree.chmod(0o000)
    try:
        proc = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--", sys.executable,
                               "-m", "iobench.cli", "run", "--dataset", str(tree), *RUN],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
    finally:
        tree.chmod(0o755)
    assert _line(proc, 3) == f"dataset {tree} is not readable (permission denied)"
    assert os.listdir(tree) == ["c"]


def _context(runs: list) -> RunContext:
    result = Result.load(GOLDEN)
    result.runs = runs
    return RunContext(manifest=None, settings=result.settings, result=result, path=Path("r/result.json"),  # type: ignore[arg-type]
                      ui=UI(quiet=True))


def test_kept_epochs_say_the_partial_one_as_such() -> None:
    run = Result.load(GOLDEN).runs[0]
    cut = run.model_copy(update={"complete": False})
    assert _context([cut]).kept_epochs() == "kept the partial epoch it stopped in (complete: false) in r/result.json"
    assert _context([run, cut]).kept_epochs() == ("kept 1 measured epoch and the partial one it stopped in "
                                                  "(complete: false) in r/result.json")
    assert _context([run, run]).kept_epochs() == "kept 2 measured epochs in r/result.json"


def test_a_40_column_terminal_keeps_samples_per_s(tmp_path: Path) -> None:
    table = runs_table(Result.load(GOLDEN)).narrow()
    console = Console(file=io.StringIO(), width=40, force_terminal=True, no_color=True)
    shown, hidden = fit(table, console, 40)
    console.print(shown)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "samples/s" not in hidden and "samples/s" in text and "35,050" in text
    assert max(len(re.sub(r"\x1b\[[0-9;]*m", "", ln)) for ln in text.splitlines()) <= 40
    # the real run, in a real 40-column terminal (rich takes COLUMNS and TTY_COMPATIBLE)
    (tmp_path / "t" / "c").mkdir(parents=True)
    for i in range(40):
        (tmp_path / "t" / "c" / f"{i}.jpg").write_bytes(JPEG)
    env = {**os.environ, "COLUMNS": "40", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    proc = iobench("run", "--dataset", str(tmp_path / "t"), *RUN, "--threads", "1", "--out", str(tmp_path / "o"),
                   env=env)
    assert proc.returncode == 0, proc.stderr
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", proc.stdout + proc.stderr)  # the terminal's codes (bold, ...)
    head = next(ln for ln in plain.splitlines() if ln.lstrip().startswith("engine"))
    assert "samples/s" in head, proc.stdout
