"""RDMA devices from sysfs trees recorded on real machines, and ibv_devinfo text from a real capture.

The trees under tests/data/sysfs/ come from public fixtures (prometheus procfs and node_exporter, see the
README there) or are DERIVED file by file from the A100 RoCE capture; nothing in them is made up. The
expected values below are read off those files.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from pathlib import Path

import pytest

from pytest_gpufabric.fabric import ibv_devinfo, rdma

DATA = Path(__file__).parent / "data"
SYSFS = DATA / "sysfs"
A100 = DATA / "captures" / "a100-pcie-roce-2node"
TREES = sorted(p.name for p in SYSFS.iterdir() if (p / "sys/class/infiniband").is_dir())
EXCERPTS = {"procfs-class": ("procfs-class.infiniband.ttar", "sys"), "node-exporter-sys": (
    "node-exporter-sys.infiniband.ttar", "")}

# the extractor kept next to the trees it made (a script, not a package module)
_spec = importlib.util.spec_from_file_location("extract_ttar", SYSFS / "extract_ttar.py")
extract_ttar = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(extract_ttar)


def _ib(tree: str) -> Path:
    return SYSFS / tree / "sys/class/infiniband"


def _text(path: Path) -> str:
    return path.read_text().strip()


def _files(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


def test_the_trees_are_there():
    assert TREES == ["a100-pcie-roce-2node-derived", "node-exporter-sys", "procfs-class"]


@pytest.mark.parametrize("tree", sorted(EXCERPTS))
def test_materialised_tree_is_exactly_its_excerpt(tree, tmp_path):
    excerpt, under = EXCERPTS[tree]
    written = extract_ttar.materialise((SYSFS / excerpt).read_text(encoding="latin-1"), str(tmp_path), under)
    assert sorted(written) == _files(SYSFS / tree)
    for rel in written:
        assert (SYSFS / tree / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel


def test_ttar_records_keep_newlines_as_recorded():
    records = {path: body for kind, path, body in extract_ttar.parse_ttar(
        (SYSFS / "procfs-class.infiniband.ttar").read_text()) if kind == "file"}
    assert records["class/infiniband/mlx5_0/node_guid"] == b"0a7f:bc12:45ef:d23b"  # "EOF": no final newline
    assert records["class/infiniband/mlx4_0/ports/2/link_layer"] == b"InfiniBand\n\n"  # "Lines: 2"
    assert records["class/infiniband/mlx4_0/ports/1/rate"] == b"40 Gb/sec (4X QDR)\n"


# ------------------------------------------------------------------------------ discover, per tree


@pytest.mark.parametrize("tree", TREES)
def test_discover_reads_what_every_file_says(tree):
    base = _ib(tree)
    devices = rdma.discover_rdma(str(SYSFS / tree))
    assert [d.name for d in devices] == sorted(os.listdir(base))
    for dev in devices:
        ddir = base / dev.name
        for attr in ("node_guid", "fw_ver", "board_id", "hca_type"):
            path = ddir / attr
            assert getattr(dev, attr) == (_text(path) if path.exists() else None), (dev.name, attr)
        assert dev.pci_bus_id is None and dev.numa_node is None and dev.netdevs is None  # no device link
        assert [p.port for p in dev.ports] == sorted(int(p) for p in os.listdir(ddir / "ports"))
        for port in dev.ports:
            pdir = ddir / "ports" / str(port.port)
            assert port.device == dev.name
            assert port.rate_text == _text(pdir / "rate")
            assert (port.rate_gbit, port.width) == rdma.parse_rate(_text(pdir / "rate"))
            assert (port.state_code, port.state) == rdma.parse_state(_text(pdir / "state"))
            assert (port.phys_state_code, port.phys_state) == rdma.parse_state(_text(pdir / "phys_state"))
            assert port.link_layer == _text(pdir / "link_layer")
            for group in ("counters", "counters_ext", "hw_counters"):
                gdir = pdir / group
                got = getattr(port, group)
                if not gdir.is_dir():
                    assert got is None
                    continue
                for f in gdir.iterdir():
                    value = _text(f)
                    if value.isdigit():
                        assert got[f.name] == int(value)
                    else:  # kept as raw text for the report, not as a number
                        assert f.name not in got and port.raw[f"{group}/{f.name}"] == value
            assert port.active_mtu is None  # no netdev MTU and no ibv_devinfo in a sysfs tree of an IB port


def test_procfs_tree_literally():
    devs = {d.name: d for d in rdma.discover_rdma(str(SYSFS / "procfs-class"))}
    assert list(devs) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    hfi = devs["hfi1_0"]
    assert hfi.board_id == "HPE 100Gb 1-port OP101 QSFP28 x16 PCIe Gen3 with Intel Omni-Path Adapter"
    assert hfi.fw_ver == "1.27.0" and hfi.hca_type is None and hfi.node_guid is None
    assert (hfi.ports[0].rate_gbit, hfi.ports[0].width, hfi.ports[0].rate_text) == (100.0, "4X", "100 Gb/sec (4X EDR)")
    assert hfi.ports[0].counters["port_rcv_data"] == 345091702026
    mlx4 = devs["mlx4_0"]
    assert (mlx4.board_id, mlx4.fw_ver, mlx4.hca_type) == ("SM_1141000001000", "2.31.5050", "MT4099")
    assert [(p.port, p.rate_gbit, p.width, p.link_layer) for p in mlx4.ports] == [
        (1, 40.0, "4X", "InfiniBand"), (2, 40.0, "4X", "InfiniBand")]  # port 2's file is "InfiniBand\n\n"
    assert mlx4.port(2).counters["port_xmit_wait"] == 3846
    mlx5 = devs["mlx5_0"]
    assert (mlx5.node_guid, mlx5.fw_ver, mlx5.hca_type) == ("0a7f:bc12:45ef:d23b", "14.28.2006", "MT4118")
    p = mlx5.ports[0]
    assert (p.state_code, p.state, p.rate_gbit, p.width) == (4, "ACTIVE", 25.0, "1X")
    # the fixture's phys_state file says "4: ACTIVE" (a live port says "5: LinkUp"): read as written
    assert (p.phys_state_code, p.phys_state) == (4, "ACTIVE")
    assert p.counters["port_xmit_data"] == 2880761508848 and p.counters["unicast_xmit_packets"] == 10907922116
    assert p.hw_counters["rx_write_requests"] == 742114 and p.hw_counters["local_ack_timeout_err"] == 131
    assert p.counters_ext is None


def test_node_exporter_tree_literally():
    devs = {d.name: d for d in rdma.discover_rdma(str(SYSFS / "node-exporter-sys"))}
    assert list(devs) == ["i40iw0", "mlx4_0"]
    i40 = devs["i40iw0"]
    assert (i40.board_id, i40.fw_ver, i40.hca_type) == ("I40IW Board ID", "0.2", "I40IW")
    p = i40.ports[0]
    assert (p.rate_text, p.rate_gbit, p.width) == ("10 Gb/sec (4X)", 10.0, "4X")  # no speed name: old SDR form
    assert p.counters == {}  # 17 files, none a number
    assert len(p.raw) == 17 and p.raw["counters/port_xmit_data"] == "N/A (no PMA)"
    assert rdma.port_data_bytes(p) is None and rdma.rdma_write_ops(p) is None
    mlx4 = devs["mlx4_0"]
    p1 = mlx4.port(1)
    assert p1.counters["port_xmit_wait"] == 4294967295 and p1.counters["port_rcv_packets"] == 6825908347
    assert p1.counters_ext["port_rcv_data_64"] == 4631917 and p1.counters_ext["port_xmit_packets_64"] == 0
    assert rdma.port_data_bytes(p1) == (3733440 * 4, 4631917 * 4)
    assert rdma.port_data_bytes(mlx4.port(2)) == (0, 0)


def test_derived_a100_irdma_tree_literally():
    (dev,) = rdma.discover_rdma(str(SYSFS / "a100-pcie-roce-2node-derived"))
    assert (dev.name, dev.fw_ver, dev.node_guid) == ("irdma0", "1.53", "b696:91ff:feec:a458")
    assert dev.board_id is None and dev.hca_type is None and dev.node_type is None  # the capture does not say
    (p,) = dev.ports
    assert (p.state_code, p.state, p.phys_state_code, p.phys_state) == (4, "ACTIVE", 5, "LinkUp")
    assert p.link_layer == "Ethernet" and p.lid == 1
    # 4X x EDR (25 Gb/s a lane): what irdma reported for every port before it asked the netdev for its speed
    assert (p.rate_gbit, p.width) == (100.0, "4X")
    assert p.gids == ["fe80::b696:91ff:feec:a458", "::ffff:10.100.100.1"]
    assert p.counters is None
    values = dict(line.split(": ") for line in (A100 / "hw_counters-rdma-values.txt").read_text().splitlines())
    assert p.hw_counters == {name: int(v) for name, v in values.items()}
    assert rdma.rdma_write_ops(p) == (137113821, 141075419)  # operations, not bytes
    assert rdma.port_data_bytes(p) is None  # ip4*Octets were not captured
    listed = (A100 / "hw_counters-ls.txt").read_text().split()
    assert set(p.hw_counters) <= set(listed)


# ----------------------------------------------------------------------------------------- parsers


def _rate_strings() -> list[str]:
    return sorted({_text(f) for tree in TREES for f in _ib(tree).glob("*/ports/*/rate")})


def test_rates_in_the_trees():
    assert _rate_strings() == [
        "10 Gb/sec (4X)", "100 Gb/sec (4X EDR)", "25 Gb/sec (1X EDR)", "40 Gb/sec (4X QDR)"]


@pytest.mark.parametrize("text, expected", [
    ("25 Gb/sec (1X EDR)", (25.0, "1X")),
    ("100 Gb/sec (4X EDR)", (100.0, "4X")),
    ("40 Gb/sec (4X QDR)", (40.0, "4X")),
    ("2.5 Gb/sec (1X SDR)", (2.5, "1X")),
    ("10 Gb/sec (4X)", (10.0, "4X")),
    ("100 Gb/sec (4X EDR)\n", (100.0, "4X")),
    ("2.5 Gb/sec", (2.5, None)),
])
def test_parse_rate(text, expected):
    assert rdma.parse_rate(text) == expected


@pytest.mark.parametrize("text", _rate_strings())
def test_parse_rate_on_every_recorded_rate(text):
    gbit, width = rdma.parse_rate(text)
    assert gbit == float(text.split()[0]) and width == text.split("(")[1].split()[0].rstrip(")")


@pytest.mark.parametrize("bad", ["", "fast", "Gb/sec (4X)", "100 Mb/sec (4X)"])
def test_parse_rate_rejects(bad):
    with pytest.raises(ValueError):
        rdma.parse_rate(bad)


def test_parse_state():
    assert rdma.parse_state("4: ACTIVE") == (4, "ACTIVE")
    assert rdma.parse_state("5: LinkUp\n") == (5, "LinkUp")
    assert rdma.parse_state("7: Phy Test") == (7, "Phy Test")
    assert rdma.parse_state("1: CA") == (1, "CA")
    for bad in ("ACTIVE", "", "x: ACTIVE"):
        with pytest.raises(ValueError):
            rdma.parse_state(bad)


def test_roce_active_mtu():
    assert rdma.roce_active_mtu(1500) == 1024
    assert rdma.roce_active_mtu(9000) == 4096
    assert rdma.roce_active_mtu(4096) == 2048  # 96 bytes of RoCE headers do not fit in 4096 any more
    assert rdma.roce_active_mtu(300) is None


# ---------------------------------------------------------------------------------------- counters


@pytest.mark.parametrize("tree", TREES)
def test_port_data_bytes_is_four_times_the_files(tree):
    checked = 0
    for dev in rdma.discover_rdma(str(SYSFS / tree)):
        for port in dev.ports:
            cdir = _ib(tree) / dev.name / "ports" / str(port.port) / "counters"
            tx, rx = cdir / "port_xmit_data", cdir / "port_rcv_data"
            if tx.exists() and _text(tx).isdigit():
                assert rdma.port_data_bytes(port) == (4 * int(_text(tx)), 4 * int(_text(rx)))
                checked += 1
            else:
                assert rdma.port_data_bytes(port) is None
    assert checked == {"procfs-class": 4, "node-exporter-sys": 2, "a100-pcie-roce-2node-derived": 0}[tree]


def test_port_data_bytes_falls_back_to_64_bit_and_ip_octets():
    saturated = rdma.RdmaPort("mlx4_0", 1, counters={"port_xmit_data": 2**32 - 1, "port_rcv_data": 7},
                              counters_ext={"port_xmit_data_64": 5_000_000_000, "port_rcv_data_64": 7})
    assert rdma.port_data_bytes(saturated) == (20_000_000_000, 28)
    irdma = rdma.RdmaPort("irdma0", 1, hw_counters={"ip4OutOctets": 10, "ip4InOctets": 20, "ip6OutOctets": 1})
    assert rdma.port_data_bytes(irdma) == (11, 20)  # octets are bytes: no x4
    assert rdma.rdma_write_ops(rdma.RdmaPort("irdma0", 1, hw_counters={"OutRdmaWrites": 3})) == (3, None)


# ------------------------------------------------------------------------------------------ snapshot


@pytest.mark.parametrize("tree", TREES)
def test_snapshot_of_a_tree_reads_the_same(tree, tmp_path):
    copied = rdma.snapshot_rdma(str(SYSFS / tree), tmp_path)
    assert sorted(copied) == sorted(f"sys/{f}" for f in _files(SYSFS / tree / "sys"))
    assert not (tmp_path / rdma.UNREADABLE_LIST).exists()
    assert rdma.discover_rdma(str(tmp_path)) == rdma.discover_rdma(str(SYSFS / tree))


PCI_FUNCTION = "/sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.0"  # a placement for the links, not a recording


def _live_layout(tmp_path: Path) -> Path:
    """The procfs mlx5_0 files laid out as a live /sys holds them: the class entry and `device` are links.

    Only the links are added (the PCI place is this test's own); every file is the recorded one. One counter
    becomes a socket, which even root cannot open: the unreadable file a live tree can have.
    """
    root = tmp_path / "live"
    real = root / PCI_FUNCTION.lstrip("/") / "infiniband/mlx5_0"
    shutil.copytree(_ib("procfs-class") / "mlx5_0", real)
    (real / "device").symlink_to("../../../0000:3b:00.0")
    klass = root / "sys/class/infiniband"
    klass.mkdir(parents=True)
    (klass / "mlx5_0").symlink_to("../.." + PCI_FUNCTION[len("/sys"):] + "/infiniband/mlx5_0")
    counter = real / "ports/1/counters/symbol_error"
    counter.unlink()
    cwd = os.getcwd()
    os.chdir(counter.parent)  # AF_UNIX paths are short; bind by relative name
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind("symbol_error")
        sock.close()
    finally:
        os.chdir(cwd)
    return root


def test_snapshot_of_a_live_layout(tmp_path):
    live = _live_layout(tmp_path)
    before = rdma.discover_rdma(str(live))
    (dev,) = before
    assert dev.pci_bus_id == "0000:3b:00.0"  # from the link, through sysfs_pci
    assert "symbol_error" not in dev.ports[0].counters  # unreadable: not recorded
    assert dev.ports[0].counters["port_xmit_data"] == 2880761508848

    skipped: list[str] = []
    copied = rdma.snapshot_rdma(str(live), tmp_path / "bundle", skipped)
    snap = tmp_path / "bundle"
    assert skipped == ["sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"]
    assert (snap / rdma.UNREADABLE_LIST).read_text() == skipped[0] + "\n"
    assert "sys/class/infiniband/mlx5_0/device.symlink" in copied
    assert _text(snap / "sys/class/infiniband/mlx5_0/device.symlink") == PCI_FUNCTION
    assert not (snap / "sys/class/infiniband/mlx5_0/device").exists()  # the function has no numa_node, no net/
    assert not any(p.is_symlink() for p in snap.rglob("*"))  # travels as tar/zip
    assert rdma.discover_rdma(str(snap)) == before


def test_no_infiniband_class(tmp_path):
    assert rdma.discover_rdma(str(tmp_path)) == []
    assert rdma.snapshot_rdma(str(tmp_path), tmp_path / "out") == []
    assert rdma.discover_rdma(str(tmp_path / "does-not-exist")) == []


# --------------------------------------------------------------------------------------- ibv_devinfo


def test_parse_ibv_devinfo_a100_capture():
    (dev,) = ibv_devinfo.parse_ibv_devinfo((A100 / "ibv_devinfo-v.txt").read_text())
    assert dev["hca_id"] == "irdma0"
    assert (dev["fw_ver"], dev["node_guid"], dev["vendor_id"], dev["vendor_part_id"], dev["phys_port_cnt"]) == (
        "1.53", "b696:91ff:feec:a458", "0x8086", 5531, 1)
    (port,) = dev["ports"]
    assert port["port"] == 1
    assert (port["state"], port["state_code"]) == ("PORT_ACTIVE", 4)
    assert (port["max_mtu"], port["active_mtu"]) == (4096, 1024)
    assert port["link_layer"] == "Ethernet"
    assert (port["active_width"], port["active_width_code"]) == ("4X", 2)
    assert (port["active_speed"], port["active_speed_code"]) == ("25.0 Gbps", 32)
    assert (port["phys_state"], port["phys_state_code"]) == ("LINK_UP", 5)
    assert port["port_lid"] == 1
    assert port["gids"] == [
        {"index": 0, "gid": "fe80::b696:91ff:feec:a458", "type": "RoCE v2"},
        {"index": 1, "gid": "::ffff:10.100.100.1", "type": "RoCE v2"},
    ]


def test_parse_ibv_devinfo_without_devices():
    text = (DATA / "captures/ci-no-rdma/ibv_devinfo-no-device.txt").read_text()
    assert ibv_devinfo.parse_ibv_devinfo(text) == []


def test_merge_ibv_devinfo_gives_the_mtu_sysfs_lacks():
    devices = rdma.discover_rdma(str(SYSFS / "a100-pcie-roce-2node-derived"))
    assert devices[0].ports[0].active_mtu is None
    ibv_devinfo.merge_ibv_devinfo(devices, ibv_devinfo.parse_ibv_devinfo((A100 / "ibv_devinfo-v.txt").read_text()))
    port = devices[0].ports[0]
    assert (port.active_mtu, port.active_mtu_source) == (1024, "ibv_devinfo")
    # the two sources agree on everything they both say
    assert (port.width, port.lid, port.link_layer) == ("4X", 1, "Ethernet")
    assert port.gids == ["fe80::b696:91ff:feec:a458", "::ffff:10.100.100.1"]
