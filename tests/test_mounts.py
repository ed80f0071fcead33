from pathlib import Path

from iobench.host.mounts import MountEntry, block_info, describe, fs_details, fs_family, host_info, mount_of

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


# Real /proc/mounts lines of each kind iobench meets (Isilon/OneFS over NFSv4.1, a NetApp-style NFSv3
# export, Lustre, the test beds' FUSE mounts, XFS on a loop device).
ISILON = ("isilon-sc.corp:/ifs/data/imagenet /mnt/isilon nfs4 rw,relatime,vers=4.1,rsize=1048576,wsize=1048576,"
          "namlen=255,hard,proto=tcp,nconnect=8,timeo=600,retrans=2,sec=sys,clientaddr=10.1.2.3,local_lock=none,"
          "addr=10.1.0.10 0 0")
NFS3 = ("filer:/vol/train /mnt/nfs nfs rw,relatime,vers=3,rsize=65536,wsize=65536,namlen=255,acregmin=60,"
        "acregmax=60,acdirmin=60,acdirmax=60,hard,nocto,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.0.0.5,"
        "mountvers=3,mountport=635,mountproto=udp,local_lock=none,addr=10.0.0.5 0 0")
LUSTRE = "10.0.0.1@o2ib:/lustre /mnt/lustre lustre rw,flock,lazystatfs,encrypt 0 0"
SSHFS = "root@127.0.0.1:/tmp/export /mnt/s fuse.sshfs rw,nosuid,nodev,relatime,user_id=0,group_id=0 0 0"
GLUSTER = ("127.0.0.1:/vol /mnt/g fuse.glusterfs rw,relatime,user_id=0,group_id=0,default_permissions,allow_other,"
           "max_read=131072 0 0")
XFS = "/dev/loop0 /mnt/xfs xfs rw,relatime,attr2,inode64,logbufs=8,logbsize=32k,noquota 0 0"


def test_nfs4_isilon_settings():
    details, unread = fs_details(MountEntry.parse(ISILON), Path("/mnt/isilon"))
    assert details["family"] == "nfs" and details["server"] == "isilon-sc.corp"
    assert (details["vers"], details["rsize"], details["wsize"], details["nconnect"]) == ("4.1", 1048576, 1048576, 8)
    assert details["hard"] == "set" and details["proto"] == "tcp" and details["timeo"] == 600
    assert details["actimeo"].startswith("not set")  # attribute caching at kernel defaults, said so
    assert unread == []


def test_nfs3_attribute_cache_and_default_nconnect():
    details, _ = fs_details(MountEntry.parse(NFS3), Path("/mnt/nfs"))
    assert details["vers"] == 3 and details["rsize"] == 65536
    assert (details["acregmin"], details["acdirmax"]) == (60, 60) and details["nocto"] == "set"
    assert details["nconnect"].startswith("not set")
    assert "actimeo" not in details  # the acreg/acdir values above are the attribute-cache settings


def test_lustre_without_tools_says_what_could_not_be_read(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    details, unread = fs_details(MountEntry.parse(LUSTRE), Path("/mnt/lustre"))
    assert details["family"] == "lustre"
    assert any("lfs not installed" in u for u in unread) and any("lctl not installed" in u for u in unread)


def test_lustre_tools_output_is_parsed(tmp_path, monkeypatch):
    # the text real `lfs getstripe -d` and `lctl get_param` print, from stand-ins on PATH
    (tmp_path / "lfs").write_text("#!/bin/sh\necho 'stripe_count:  4 stripe_size:   1048576 pattern:       raid0 "
                                  "stripe_offset: -1'\n")
    (tmp_path / "lctl").write_text("#!/bin/sh\necho llite.lustre-ffff9a5c.max_read_ahead_mb=64\n"
                                   "echo llite.lustre-ffff9a5c.max_read_ahead_per_file_mb=64\n"
                                   "echo llite.lustre-ffff9a5c.statahead_max=32\n")
    for f in ("lfs", "lctl"):
        (tmp_path / f).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    details, unread = fs_details(MountEntry.parse(LUSTRE), Path("/mnt/lustre"))
    assert unread == []
    assert (details["stripe_count"], details["stripe_size"], details["stripe_offset"]) == (4, 1048576, "-1")
    assert (details["max_read_ahead_mb"], details["statahead_max"]) == (64, 32)


def test_fuse_subtypes_and_local_xfs():
    ssh, _ = fs_details(MountEntry.parse(SSHFS), Path("/mnt/s"))
    assert (ssh["family"], ssh["subtype"]) == ("fuse", "sshfs")
    gl, _ = fs_details(MountEntry.parse(GLUSTER), Path("/mnt/g"))
    assert (gl["subtype"], gl["max_read"], gl["allow_other"]) == ("glusterfs", 131072, "set")
    xfs, unread = fs_details(MountEntry.parse(XFS), Path("/mnt/xfs"))
    assert xfs == {"family": "local"} and unread == []
    assert fs_family("ext4") == "local" and fs_family("cifs") == "network"


def test_describe_the_local_disk():
    d = describe(Path("/"))
    assert d["path"] == "/" and d["family"] in ("local", "network", "fuse") and ":" in d["bdi"]
