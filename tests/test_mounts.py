from pathlib import Path

from iobench.mounts import MountEntry, block_info, host_info, mount_of

MOUNTS = """\
/dev/vda / ext4 rw,relatime,discard 0 0
proc /proc proc rw,relatime 0 0
/dev/loop3 /mnt/xfs\\040bed xfs rw,relatime,attr2,inode64,logbufs=8,noquota 0 0
isilon.lab:/ifs/data /mnt/isilon nfs4 rw,relatime,vers=4.1,rsize=1048576,wsize=1048576,hard,proto=tcp 0 0
/dev/vda /mnt/isilon/sub ext4 rw 0 0
"""


def test_longest_mount_point_wins_and_escapes_are_decoded():
    assert mount_of(Path("/etc"), MOUNTS).path == "/"
    m = mount_of(Path("/mnt/xfs bed/data"), MOUNTS)
    assert (m.path, m.fstype, m.source) == ("/mnt/xfs bed", "xfs", "/dev/loop3")
    assert mount_of(Path("/mnt/isilon/a/b"), MOUNTS).fstype == "nfs4"
    assert mount_of(Path("/mnt/isilon/sub/x"), MOUNTS).fstype == "ext4"
    assert mount_of(Path("/mnt/isilonx"), MOUNTS).path == "/"


def test_option_map():
    m = MountEntry.parse("srv:/x /mnt nfs4 rw,vers=4.1,rsize=1048576,hard 0 0")
    assert m.option_map["rsize"] == "1048576" and m.option_map["hard"] == "" and m.option_map["vers"] == "4.1"


def test_block_info_of_the_local_disk():
    info = block_info(Path("/"))
    assert ":" in info.bdi
    if info.device is not None:  # a block-device root: its readahead is readable
        assert info.read_ahead_kb is not None and info.read_ahead_kb >= 0


def test_host_info_has_what_a_report_needs():
    h = host_info()
    assert h["cpus"] >= 1 and h["ram_bytes"] > 0 and h["kernel"] and h["iobench"]
