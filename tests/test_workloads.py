"""Named workload files: every shipped one loads; bad files fail in one line naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import iobench

from iobench import workload
from iobench.dataset.sizes import parse_dist
from iobench.errors import UserError
from iobench.gpu import rates as gpus

REQUIRED = {"imagenet-resnet50", "imagenet-vit-b16", "small-files-4k", "coco-detection", "mlperf-storage-resnet50",
            "mlperf-storage-retinanet"}

GOOD = """\
description = "a test workload"

[dataset]
files = 100
size_dist = "fixed:8KiB"

[pattern]
engine = "threads"
threads = 4
batch_size = 32

[consumer]
model = "ResNet-50"
gpu = "h200"
"""


def write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_required_workloads_are_shipped_and_load():
    names = {name: description for name, description, _ in workload.available()}
    assert set(names) >= REQUIRED
    for name, description in names.items():
        w = workload.load(name)
        assert w.name == name and w.description == description and not description.startswith("(invalid")
        rate, source, _ = w.rate()
        assert rate > 0 and source


def test_default_is_imagenet_resnet50_on_a_sourced_gpu():
    w = workload.load(workload.DEFAULT)
    assert w.name == "imagenet-resnet50"
    assert w.dataset.size_dist == "imagenet"
    assert (w.consumer.model, w.consumer.au_target, w.consumer.rate) == ("resnet50", 0.90, None)
    assert w.rate()[0] == gpus.lookup("resnet50", w.consumer.gpu).samples_per_s
    assert w.rate()[::2] == (4677.3, "measured")


def test_mlperf_workloads_say_their_kind_the_others_take_each_gpus_first():
    """The bug: the default workload said kind "measured", so `run --gpu h100` was an error; MLPerf Storage's
    workloads mean something at its emulated accelerators only, so they keep their kind."""
    kinds = {name: workload.load(name).rate().kind for name, _, _ in workload.available()}
    for name in ("mlperf-storage-resnet50", "mlperf-storage-retinanet", "coco-detection"):
        assert kinds[name] == workload.load(name).consumer.kind == "mlperf-storage", name
    for name in ("imagenet-resnet50", "imagenet-vit-b16", "small-files-4k"):
        w = workload.load(name)
        assert kinds[name] == "measured" and w.consumer.kind is None, name
    default = workload.load(workload.DEFAULT)
    assert default.merged(gpu="h100").rate()[::2] == (400 / 0.224, "mlperf-storage")
    assert default.merged(gpu="A100-80GB").rate()[::2] == (2470.0, "published")
    assert default.merged(gpu="a100").rate().kind == "published"


def test_mlperf_storage_workload_mirrors_its_settings():
    """configs/dlio/workload/resnet50_h100.yaml (and _a100) at 1833c96, unchanged since v2.0."""
    w = workload.load("mlperf-storage-resnet50")
    assert w.dataset.size_dist == "fixed:114660"
    assert w.pattern.batch_size == 400 and w.consumer.au_target == 0.90
    assert (w.pattern.workers, w.pattern.epochs, w.pattern.decode) == ([8], 5, False)
    assert w.rate()[0] == 400 / 0.224 and w.rate().kind == "mlperf-storage"
    assert w.merged(gpu="a100").rate()[::2] == (400 / 0.435, "mlperf-storage"), "the file's kind holds for --gpu"
    assert w.merged(gpu="a100", kind="published").rate()[::2] == (2470.0, "published"), "--rate-kind overrides it"
    with pytest.raises(UserError, match=r"^workload mlperf-storage-resnet50: --model/--gpu: no mlperf-storage rate "
                                        r"for resnet50 on h200 \(resnet50 on h200 has: measured\); use --rate-kind "
                                        r"measured or --rate N"):
        w.merged(gpu="h200")


def test_small_files_and_coco_shapes():
    small = workload.load("small-files-4k")
    assert small.dataset.size_dist == "fixed:4096"
    coco = workload.load("coco-detection")
    dist = parse_dist(coco.dataset.size_dist)
    assert dist.kind == "uniform" and 100_000 < (dist.low + dist.high) / 2 < 200_000
    # its consumer: MLPerf Storage v3.0's emulated RetinaNet (the H100 config it named was deleted before v3.0)
    assert (coco.consumer.model, coco.consumer.gpu, coco.consumer.au_target) == ("retinanet", "b200", 0.85)
    assert (coco.pattern.batch_size, coco.merged(gpu="mi355").pattern.batch_size) == (24, 36)


def test_mlperf_storage_retinanet_has_v3s_parameters():
    """mlcommons/storage configs/dlio/workload/retinanet_b200.yaml and retinanet_mi355.yaml at 1833c96."""
    w = workload.load("mlperf-storage-retinanet")
    d, p, c = w.dataset, w.pattern, w.consumer
    assert (d.files, d.size_dist, d.classes) == (1_170_301, "fixed:322957", 1)
    dist = parse_dist(d.size_dist)
    assert dist.kind == "fixed" and dist.low == dist.high == gpus.SAMPLE_BYTES["retinanet"].bytes == 322_957
    assert (p.engine, p.workers, p.batch_size, p.batch_of_gpu, p.decode, p.epochs, p.order) == (
        "dataloader", [8], 24, True, False, 8, "shuffled")
    assert (c.model, c.gpu, c.kind, c.au_target, c.rate) == ("retinanet", "b200", "mlperf-storage", 0.85, None)
    assert w.rate()[::2] == (24 / 0.04755, "mlperf-storage")
    # --gpu mi355 takes that config's rate and its batch; --batch-size still wins
    mi355 = w.merged(gpu="AMD Instinct MI355X")
    assert (mi355.consumer.gpu, mi355.pattern.batch_size, mi355.rate()[::2]) == ("mi355", 36,
                                                                                 (36 / 0.071325, "mlperf-storage"))
    assert mi355.merged(gpu="b200").pattern.batch_size == 24
    assert w.merged(gpu="mi355", batch_size=48).pattern.batch_size == 48
    assert w.merged(rate=100.0).pattern.batch_size == 24  # a given rate has no row: the file's batch
    with pytest.raises(UserError, match=r"no consumption rate for retinanet on a100 \(of any kind\): MLPerf Storage "
                                        r"v3\.0 has no retinanet config for a100"):
        w.merged(gpu="a100")


def test_workloads_json_lists_mlperf_storage_retinanet():
    """The real CLI: `iobench workloads --json -`."""
    import json

    rows = {r["name"]: r for r in json.loads(iobench("workloads", "--json", "-", check=True).stdout)}
    retina = rows["mlperf-storage-retinanet"]
    assert "322,957 B" in retina["description"] and "AU 0.85" in retina["description"]
    wl = retina["workload"]
    assert wl["dataset"]["size_dist"] == "fixed:322957" and wl["dataset"]["files"] == 1_170_301
    assert wl["consumer"]["au_target"] == 0.85 and wl["consumer"]["kind"] == "mlperf-storage"
    assert (wl["pattern"]["batch_size"], wl["pattern"]["workers"], wl["pattern"]["decode"]) == (24, [8], False)
    assert "mlperf-storage-retinanet" in iobench("workloads", check=True).stdout


def test_run_takes_each_gpus_first_kind(tmp_path):
    """The real CLI: `run --gpu h100` (no --rate-kind) replays with MLPerf Storage's emulated H100 and says so."""
    from iobench.result import Result

    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "40", "--engine", "threads", "--threads", "2", "--cache",
            "warm", "--no-fio", "--no-metadata", "--gpu", "h100", "--out", str(out), "--quiet",
            check=True)
    s = Result.load(out / "result.json").settings
    assert (s.gpu, s.model, s.rate_kind, s.rate_per_gpu) == ("h100", "resnet50", "mlperf-storage", 400 / 0.224)
    assert s.rate_source.startswith("mlperf-storage: mlcommons/storage at commit 1833c96")


def test_a_path_works_and_names_are_normalised(tmp_path):
    path = write(tmp_path, GOOD)
    w = workload.load(str(path))
    assert w.name == "mine" and w.path == str(path)
    assert w.dataset.size_dist == "fixed:8192" and w.dataset.classes is None
    assert w.pattern.threads == [4] and w.pattern.workers == [8] and w.pattern.order == "shuffled"
    assert (w.consumer.model, w.consumer.gpu) == ("resnet50", "h200")
    assert workload.load(path).name == "mine"  # a Path too


def test_overrides_win_and_none_keeps_the_file(tmp_path):
    w = workload.load(str(write(tmp_path, GOOD)))
    m = w.merged(files=None, workers=(2, 4), batch_size=64, decode=True, gpu="a100", au_target=0.8, rate=None,
                 kind="published")
    assert m.dataset.files == 100 and m.pattern.workers == [2, 4] and m.pattern.batch_size == 64
    assert m.pattern.decode is True and m.consumer.gpu == "a100" and m.consumer.au_target == 0.8
    assert m.rate()[0] == 2470.0 and m.rate().kind == "published"
    assert w.pattern.batch_size == 32, "the original is unchanged"
    r = w.merged(rate=1000.0, gpu="t4")  # an explicit rate needs no table row
    assert r.rate() == (1000.0, "given with --rate", "given")
    with pytest.raises(TypeError):
        w.merged(colour="red")


def test_bad_override_names_the_option(tmp_path):
    w = workload.load(str(write(tmp_path, GOOD)))
    with pytest.raises(UserError, match=r"^workload mine: --au-target: .*less than or equal to 1"):
        w.merged(au_target=1.5)
    with pytest.raises(UserError, match=r"^workload mine: --model/--gpu: no consumption rate for resnet50 on t4"):
        w.merged(gpu="t4")
    # a kind asked for holds: an A100 has no measured rate (no silent switch to its published one)
    with pytest.raises(UserError, match=r"^workload mine: --model/--gpu: no measured rate for resnet50 on a100 "
                                        r"\(resnet50 on a100 has: published, mlperf-storage\)"):
        w.merged(gpu="a100", kind="measured")


def test_kind_in_a_file_the_old_name_and_overrides(tmp_path):
    old = workload.load(str(write(tmp_path, GOOD.replace('gpu = "h200"', 'gpu = "h100"\nkind = "mlperf-storage-'
                                                                          'emulated"'))))
    assert old.consumer.kind == "mlperf-storage" and old.rate()[::2] == (400 / 0.224, "mlperf-storage")
    assert old.merged(gpu="h200", kind="measured").rate()[::2] == (4677.3, "measured")
    given = old.merged(rate=500.0)  # --rate replaces the file's kind: a given rate has none
    assert given.consumer.kind is None and given.rate() == (500.0, "given with --rate", "given")
    rated = workload.load(str(write(tmp_path, GOOD.replace('gpu = "h200"', 'gpu = "h200"\nrate = 750.0'), "r.toml")))
    assert rated.rate().kind == "given"
    assert rated.merged(kind="measured").rate()[::2] == (4677.3, "measured"), "--rate-kind asks for the table's row"
    with pytest.raises(UserError, match=r"^--rate and --rate-kind do not go together"):
        old.merged(rate=500.0, kind="measured")


@pytest.mark.parametrize(("old", "new", "field", "says"), [
    ('size_dist = "fixed:8KiB"', 'size_dist = "fixed:8KiB"\ncolour = "red"', "dataset.colour", "unknown field"),
    ("[consumer]", 'speed = 3\n[consumer]', "pattern.speed", "unknown field"),
    ("files = 100", 'files = "many"', "dataset.files", "valid integer"),
    ("batch_size = 32", "batch_size = 0", "pattern.batch_size", "greater than or equal to 1"),
    ('engine = "threads"', 'engine = "dali"', "pattern.engine", "'threads' or 'dataloader'"),
    ("threads = 4", "threads = [4, 0]", "pattern.threads", ">= 1"),
    ('size_dist = "fixed:8KiB"', 'size_dist = "gaussian:8KiB"', "dataset.size_dist", "unknown size distribution"),
    ('gpu = "h200"', 'gpu = "t4"', "consumer.model/gpu", "no consumption rate for ResNet-50 on t4"),
    ('gpu = "h200"', 'gpu = "h200"\nkind = "mlperf-storage-emulated"', "consumer.model/gpu", "no mlperf-storage"),
    ('gpu = "h200"', 'gpu = "h200"\nkind = "guessed"', "consumer.kind", "unknown kind of rate 'guessed'"),
    ('gpu = "h200"', 'gpu = "h200"\nkind = "measured"\nrate = 10.0', "consumer.rate", "a given rate has no kind"),
    ('gpu = "h200"', 'gpu = "h200"\nau_target = 0', "consumer.au_target", "greater than 0"),
    ('model = "ResNet-50"\n', "", "consumer.model", "missing"),
    ('description = "a test workload"\n', "", "description", "missing"),
])
def test_bad_file_is_one_line_naming_file_and_field(tmp_path, old, new, field, says):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(UserError) as info:
        workload.load(str(path))
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: {field}: "), msg
    assert says in msg


def test_bad_toml_missing_file_and_unknown_name(tmp_path):
    path = write(tmp_path, "[dataset\n")
    with pytest.raises(UserError, match=r"mine\.toml: not valid TOML"):
        workload.load(str(path))
    with pytest.raises(UserError, match="no workload file"):
        workload.load(str(tmp_path / "absent.toml"))
    with pytest.raises(UserError, match=r"no workload 'nope' \(shipped: .*imagenet-resnet50"):
        workload.load("nope")
    with pytest.raises(UserError, match="name: unknown field"):
        workload.load(str(write(tmp_path, 'name = "x"\n' + GOOD)))


def test_shipped_dir_is_the_source_tree_folder():
    assert workload.shipped_dir() == Path(__file__).resolve().parents[1] / "workloads"


def _one_line_error(proc, says: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr


def test_run_takes_one_kind_and_refuses_rate_with_rate_kind(tmp_path):
    """The real CLI: these fail before any dataset is made."""
    _one_line_error(iobench("run", "--mount", str(tmp_path), "--rate", "100", "--rate-kind", "measured"),
                    "--rate and --rate-kind do not go together")
    _one_line_error(iobench("run", "--mount", str(tmp_path), "--gpu", "h100", "--rate-kind", "published"),
                    "no published rate for resnet50 on h100 (resnet50 on h100 has: mlperf-storage); use --rate-kind "
                    "mlperf-storage")
    _one_line_error(iobench("run", "--mount", str(tmp_path), "--workload", "mlperf-storage-retinanet", "--gpu", "h100"),
                    "retinanet_h100.yaml was deleted before v3.0")
    _one_line_error(iobench("run", "--mount", str(tmp_path), "--workload", "mlperf-storage-resnet50", "--gpu", "h200"),
                    "no mlperf-storage rate for resnet50 on h200")
    _one_line_error(iobench("run", "--mount", str(tmp_path), "--rate-kind", "published"),
                    "no published rate for resnet50 on h200 (resnet50 on h200 has: measured)")
    assert not (tmp_path / "iobench-data").exists()


def test_run_records_the_kind_the_command_line_asked_for(tmp_path):
    """--rate-kind overrides the workload file's kind, and the result says which kind its rate is."""
    from iobench.result import Result

    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "40", "--engine", "threads", "--threads", "2", "--cache",
            "warm", "--no-fio", "--no-metadata", "--workload", "mlperf-storage-resnet50", "--gpu", "a100",
            "--rate-kind", "published", "--out", str(out), "--quiet", check=True)
    s = Result.load(out / "result.json").settings
    assert (s.gpu, s.rate_per_gpu, s.rate_kind) == ("a100", 2470.0, "published")
    assert s.rate_source.startswith("published: NVIDIA/DeepLearningExamples")
