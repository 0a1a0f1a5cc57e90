"""The live metrics exporter (report/metrics.py), scraped over real HTTP on 127.0.0.1, fed with recordings.

Inputs, all recorded on real machines (nothing made up):
- NVLink: the 8 samples of tests/data/bundles/h200-nvswitch-x2-training/nvlink-traffic.json (2x H200, DDP);
  the Titan RTX `nvidia-smi nvlink -g 0` sample for a legacy counter set;
- RDMA: the sysfs trees under tests/data/sysfs/ (see the README there);
- health: tests/data/bundles/h200-nvswitch-x2/nvml.json (serials, PCIe, memory) and
  tests/data/captures/h200-nvswitch-x2/nvidia-smi-q-x.xml (temperatures, power, clocks, PCIe replays, ECC),
  which is another recording (its serials differ from the bundle's), so each is exported with its own serials.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import pytest_gpufabric
from pytest_gpufabric.fabric.nvlink_sampler import NvlinkTraffic
from pytest_gpufabric.fabric.rdma import discover_rdma
from pytest_gpufabric.formats.counters import CounterSample
from pytest_gpufabric.formats.nvlink import parse_nvlink_counters
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.report.metrics import INSTALL_HINT, MetricsExporter

DATA = Path(__file__).parent / "data"
TRAINING = DATA / "bundles" / "h200-nvswitch-x2-training" / "nvlink-traffic.json"
NVML_JSON = DATA / "bundles" / "h200-nvswitch-x2" / "nvml.json"
SMI_XML = DATA / "captures" / "h200-nvswitch-x2" / "nvidia-smi-q-x.xml"
TITAN_G0 = DATA / "bundles" / "titan-rtx-nvlink" / "nvidia-smi-nvlink-g0.sample0.txt"
SYSFS = DATA / "sysfs"


@pytest.fixture
def prom():
    return pytest.importorskip("prometheus_client")


@pytest.fixture
def exporter(prom):
    exp = MetricsExporter()
    exp.start(_free_port())
    yield exp
    exp.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# no proxy from the environment: loopback only
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _scrape(port: int) -> str:
    with _OPENER.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode("utf-8")


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _line(text: str, name: str, value: str, **labels: str) -> bool:
    """The exposition has the line ``name{labels} value``, the value exactly as written, labels in any order
    (prometheus_client 0.26 sorts them; the text format does not fix an order)."""
    for line in text.splitlines():
        head, _, tail = line.partition("} ")
        if head.startswith(name + "{") and tail == value and dict(_LABEL.findall(head[len(name) + 1:])) == labels:
            return True
    return False


def _values(prom, text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, through prometheus_client's own parser of the exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _training_samples() -> list[CounterSample]:
    return [CounterSample.from_json(s) for s in json.loads(TRAINING.read_text())["samples"]]


def _smi_gpus() -> list[tuple[int, str, dict[str, float | int | None]]]:
    """(minor number, serial, health values) per GPU of the nvidia-smi -q -x capture; "N/A" -> None."""

    def number(elem: ET.Element, path: str, unit: str = "") -> float | int | None:
        text = elem.findtext(path).strip()
        if text == "N/A":
            return None
        text = text.removesuffix(unit).strip()
        return float(text) if "." in text else int(text)

    gpus = []
    for gpu in ET.fromstring(SMI_XML.read_text()).findall("gpu"):
        gpus.append((int(gpu.findtext("minor_number")), gpu.findtext("serial"), {
            "temperature_c": number(gpu, "temperature/gpu_temp", "C"),
            "memory_temperature_c": number(gpu, "temperature/memory_temp", "C"),
            "target_temperature_c": number(gpu, "temperature/gpu_target_temperature", "C"),  # N/A on H200
            "power_w": number(gpu, "gpu_power_readings/instant_power_draw", "W"),
            "sm_clock_mhz": number(gpu, "clocks/sm_clock", "MHz"),
            "pcie_replay": number(gpu, "pci/replay_counter"),
            "ecc_dram_correctable_volatile": number(gpu, "ecc_errors/volatile/dram_correctable"),
        }))
    return gpus


# ----------------------------------------------------------------------------------------------- NVLink


def test_nvlink_counters_of_the_recorded_training_run(prom, exporter):
    samples = _training_samples()
    for sample in samples:
        exporter.observe_nvlink(sample)
    text = _scrape(exporter.port)

    assert ("# HELP gpufabric_nvlink_tx_bytes NVLink bytes transmitted, cumulative per GPU and link as the "
            "hardware counts them (can reset)\n") in text
    assert "# TYPE gpufabric_nvlink_tx_bytes gauge\n" in text
    assert "# HELP gpufabric_nvlink_rx_bytes NVLink bytes received" in text
    assert "# TYPE gpufabric_nvlink_rx_bytes gauge\n" in text
    # GPU 0 link 0 of the last sample: tx_bytes 1588725760, rx_bytes 1550364672 in the recording
    assert samples[-1].gpus[0][0].tx_bytes == 1588725760
    assert _line(text, "gpufabric_nvlink_tx_bytes", '1.58872576e+09', gpu="0", link="0")
    assert _line(text, "gpufabric_nvlink_rx_bytes", '1.550364672e+09', gpu="0", link="0")

    values = _values(prom, text)
    last = samples[-1]
    assert sorted(last.gpus) == [0, 1] and all(len(links) == 18 for links in last.gpus.values())
    for gpu, links in last.gpus.items():
        for link, count in links.items():
            labels = (("gpu", str(gpu)), ("link", str(link)))
            assert values[("gpufabric_nvlink_tx_bytes", labels)] == count.tx_bytes
            assert values[("gpufabric_nvlink_rx_bytes", labels)] == count.rx_bytes
    assert sum(1 for name, _ in values if name.startswith("gpufabric_nvlink_")) == 2 * 2 * 18


def test_nvlink_served_while_the_sampler_runs(prom, exporter):
    """NvlinkTraffic tells the exporter of every sample as its thread takes it (as the NVLink suite's training
    step and the nvlink_traffic fixture wire it): a scrape during the work already shows the links' bytes."""
    samples = _training_samples()
    observed_all = threading.Event()
    observed_in: list[str] = []

    class ReplayReader:  # the recorded samples in order, then the last one again (the counters stood still)
        def __init__(self):
            self.n = 0

        def read(self) -> CounterSample:
            sample = samples[min(self.n, len(samples) - 1)]
            self.n += 1
            return sample

    def observe(sample: CounterSample) -> None:
        exporter.observe_nvlink(sample)
        observed_in.append(threading.current_thread().name)
        if len(observed_in) >= len(samples):
            observed_all.set()

    with NvlinkTraffic(ReplayReader(), interval_s=0.001, on_sample=observe) as traffic:
        assert observed_all.wait(10)
        during = _values(prom, _scrape(exporter.port))  # the work is still running
    assert traffic.errors == []
    assert "nvlink-sampler" in observed_in
    for gpu, links in samples[-1].gpus.items():
        for link, count in links.items():
            assert during[("gpufabric_nvlink_tx_bytes", (("gpu", str(gpu)), ("link", str(link))))] == count.tx_bytes


LIVE_SCRAPES = DATA / "results" / "metrics-during-nvlink-training-on-h200-x2"


def _recorded_scrapes(prom) -> list[tuple[float, dict]]:
    """(time, values) of every scrape `hardware/record-metrics.sh` took from outside the live run, 4 a second."""
    text = gzip.decompress((LIVE_SCRAPES / "scrapes.txt.gz").read_bytes()).decode()
    scrapes = []
    for block in re.split(r"^# scrape ", text, flags=re.M)[1:]:
        stamp, exposition = block.split("\n", 1)
        scrapes.append((float(stamp), _values(prom, exposition)))
    return scrapes


def test_a_scraper_saw_the_nvlink_bytes_rise_while_the_h200s_trained(prom):
    """2x H200 SXM 141GB, 2000 DDP steps (9 s of training) with --gpu-metrics-port: every quarter second the
    scraped link counters had moved, long before the first test reported, and the last scrape holds the very
    counts the measurement recorded last."""
    scrapes = _recorded_scrapes(prom)
    live = json.loads((LIVE_SCRAPES / "results-live.json").read_text())
    assert live["summary"]["verdict"] == "ACCEPTED" and len(scrapes) > 100
    recording = json.loads(gzip.decompress((LIVE_SCRAPES / "nvlink-traffic.json.gz").read_bytes()))
    assert recording.get("sampler") is None  # no background read failed

    def tx(values, gpu, link):
        return values.get(("gpufabric_nvlink_tx_bytes", (("gpu", str(gpu)), ("link", str(link)))))

    def reported(values):
        return any(name == "gpufabric_tests_total" for name, _ in values)

    during = [values for _, values in scrapes if not reported(values) and tx(values, 1, 17) is not None]
    rising = [tx(v, 1, 17) for v in during]
    assert len(set(rising)) >= 20 and rising == sorted(rising)  # it moved, scrape after scrape
    last = recording["samples"][-1]["gpus"]
    final = scrapes[-1][1]
    for gpu, links in last.items():
        assert len(links["links"]) == 18
        for link, count in links["links"].items():
            assert tx(final, gpu, link) == count["tx_bytes"]
    serials = {str(g["index"]): g["serial"] for g in live["machine"]["gpus"]}
    health = {labels for name, labels in final if name == "gpufabric_gpu_health"}
    temperatures = {(("gpu", gpu), ("metric", "temperature_c"), ("serial", serial)) for gpu, serial in serials.items()}
    assert temperatures <= health
    outcomes = {dict(labels)["outcome"]: value for (name, labels), value in final.items()
                if name == "gpufabric_tests_total"}
    assert outcomes == {"passed": live["summary"]["passed"]}


def test_legacy_counter_set_in_bytes_is_exported_and_in_cycles_is_not(prom):
    exp = MetricsExporter()
    titan = parse_nvlink_counters(TITAN_G0.read_text())
    assert titan.units == "bytes" and titan.gpus[0][0].tx_bytes == 872359 * 1024
    exp.observe_nvlink(titan)
    assert _line(exp.exposition(), "gpufabric_nvlink_tx_bytes", "8.93295616e+08", gpu="0", link="0")

    other = MetricsExporter()
    titan.units = "cycles"  # the same counters, as a set counting cycles would report them: not bytes
    other.observe_nvlink(titan)
    assert "gpufabric_nvlink_tx_bytes{" not in other.exposition()


# ------------------------------------------------------------------------------------------------- RDMA


def _sysfs_int(tree: str, rel: str) -> int:
    return int((SYSFS / tree / "sys/class/infiniband" / rel).read_text().strip())


def test_rdma_ports_and_hw_counters_of_recorded_sysfs_trees(prom, exporter):
    for tree in ("procfs-class", "node-exporter-sys", "a100-pcie-roce-2node-derived"):
        exporter.observe_rdma(discover_rdma(str(SYSFS / tree)))
    text = _scrape(exporter.port)
    values = _values(prom, text)

    for metric in ("gpufabric_rdma_port_xmit_bytes", "gpufabric_rdma_port_rcv_bytes", "gpufabric_rdma_hw_counter"):
        assert f"# HELP {metric} " in text
        assert f"# TYPE {metric} gauge\n" in text

    def port_bytes(device: str, port: str) -> tuple[float, float]:
        labels = (("device", device), ("port", port))
        return values[("gpufabric_rdma_port_xmit_bytes", labels)], values[("gpufabric_rdma_port_rcv_bytes", labels)]

    # IB PortCounters count 4-byte words: the files times 4, exactly (procfs mlx5_0: 11.5 TB sent)
    xmit = _sysfs_int("procfs-class", "mlx5_0/ports/1/counters/port_xmit_data")
    rcv = _sysfs_int("procfs-class", "mlx5_0/ports/1/counters/port_rcv_data")
    assert port_bytes("mlx5_0", "1") == (xmit * 4, rcv * 4) == (11523046035392, 72505381512)
    assert port_bytes("hfi1_0", "1") == (1094233306172, 1380366808104)
    # node_exporter's mlx4_0 and procfs' mlx4_0 are one name in two trees: the later tree's values stand
    assert port_bytes("mlx4_0", "1") == (14933760, 18527668)
    assert port_bytes("mlx4_0", "2") == (0, 0)

    def hw(device: str, counter: str) -> float:
        return values[("gpufabric_rdma_hw_counter", (("counter", counter), ("device", device), ("port", "1")))]

    assert hw("mlx5_0", "rx_read_requests") == _sysfs_int(
        "procfs-class", "mlx5_0/ports/1/hw_counters/rx_read_requests") == 175528982
    assert hw("mlx5_0", "local_ack_timeout_err") == 131
    assert _line(text, "gpufabric_rdma_hw_counter", '742114.0', device="mlx5_0", port="1", counter="rx_write_requests")
    # irdma: operations, not bytes, and no PortCounters: hw counters only, no byte series
    assert hw("irdma0", "iwInRdmaWrites") == 141075419
    assert hw("irdma0", "iwOutRdmaWrites") == 137113821
    assert ("gpufabric_rdma_port_xmit_bytes", (("device", "irdma0"), ("port", "1"))) not in values
    # i40iw answers "N/A (no PMA)": nothing to export
    assert 'device="i40iw0"' not in text
    hw_series = [labels for name, labels in values if name == "gpufabric_rdma_hw_counter"]
    assert len(hw_series) == 25 + 8  # mlx5_0's 25 hw_counters files, irdma0's 8


# ----------------------------------------------------------------------------------------------- health


def test_gpu_health_from_recorded_nvml_and_nvidia_smi(prom, exporter):
    nvml = json.loads(NVML_JSON.read_text())
    for gpu in nvml["gpus"]:
        exporter.observe_health(gpu["index"], gpu["serial"], {
            "pcie_gen_current": gpu["pcie_gen_current"],
            "pcie_width_current": gpu["pcie_width_current"],
            "memory_total_bytes": gpu["memory_total_bytes"],
            "numa_node": None if isinstance(gpu["numa_node"], dict) else gpu["numa_node"],  # NOT_SUPPORTED
        })
    smi = _smi_gpus()
    for minor, serial, values in smi:
        exporter.observe_health(minor, serial, values)
    text = _scrape(exporter.port)

    assert ("# HELP gpufabric_gpu_health GPU health value; the metric label names it and its unit "
            "(temperature_c, power_w, ...)\n") in text
    assert "# TYPE gpufabric_gpu_health gauge\n" in text
    # the capture's GPU 0 (serial 1653924042173): "39 C", "82.57 W", sm_clock "345 MHz"; GPU 1 saw 1 replay
    assert smi[0][:2] == (0, "1653924042173") and smi[1][:2] == (1, "1654024077470")
    assert _line(text, "gpufabric_gpu_health", '39.0', gpu="0", serial="1653924042173", metric="temperature_c")
    assert _line(text, "gpufabric_gpu_health", '82.57', gpu="0", serial="1653924042173", metric="power_w")
    assert _line(text, "gpufabric_gpu_health", '345.0', gpu="0", serial="1653924042173", metric="sm_clock_mhz")
    assert _line(text, "gpufabric_gpu_health", '1.0', gpu="1", serial="1654024077470", metric="pcie_replay")
    assert _line(text, "gpufabric_gpu_health", '0.0', gpu="0", serial="1653924042173", metric="pcie_replay")
    # the bundle's nvml.json GPUs
    assert _line(text, "gpufabric_gpu_health", '16.0', gpu="0", serial="1653824016477", metric="pcie_width_current")
    assert _line(text, "gpufabric_gpu_health", '5.0', gpu="1", serial="1653824016216", metric="pcie_gen_current")
    values = _values(prom, text)
    key = ("gpufabric_gpu_health", (("gpu", "0"), ("metric", "memory_total_bytes"), ("serial", "1653824016477")))
    assert values[key] == 150754820096
    # None is skipped: N/A target temperature, NOT_SUPPORTED NUMA node
    assert 'metric="target_temperature_c"' not in text
    assert 'metric="numa_node"' not in text
    expected = sum(v is not None for _, _, vals in smi for v in vals.values()) + 2 * 3
    assert sum(1 for name, _ in values if name == "gpufabric_gpu_health") == expected

    # a value that is not read next time leaves no stale series behind
    minor, serial, vals = smi[0]
    exporter.observe_health(minor, serial, {**vals, "temperature_c": None})
    text = _scrape(exporter.port)
    assert not _line(text, "gpufabric_gpu_health", "39.0", gpu="0", serial="1653924042173", metric="temperature_c")
    assert ("gpufabric_gpu_health", (("gpu", "0"), ("metric", "temperature_c"), ("serial", "1653924042173"))) \
        not in _values(prom, text)
    assert _line(text, "gpufabric_gpu_health", '82.57', gpu="0", serial="1653924042173", metric="power_w")


# ------------------------------------------------------------------------------------------ tests, info


def test_test_outcomes_and_info(prom, exporter):
    for nodeid, outcome in [("suites/test_topology.py::test_gpu_count", "passed"),
                            ("suites/test_topology.py::test_matrix", "passed"),
                            ("suites/test_nvlink_traffic.py::test_links_moved[0]", "failed"),
                            ("suites/test_rdma.py::test_port_active", "skipped")]:
        exporter.observe_test(nodeid, outcome)
    profile = load_profile("h200-nvswitch-x2")
    exporter.set_info(profile.name, profile.sha256, pytest_gpufabric.__version__)
    text = _scrape(exporter.port)

    assert "# HELP gpufabric_tests_total Tests finished, by outcome\n" in text
    assert "# TYPE gpufabric_tests_total counter\n" in text
    assert _line(text, "gpufabric_tests_total", '2.0', outcome="passed")
    assert _line(text, "gpufabric_tests_total", '1.0', outcome="failed")
    assert _line(text, "gpufabric_tests_total", '1.0', outcome="skipped")
    assert "test_gpu_count" not in text  # node ids are not labels

    assert "# HELP gpufabric_info The profile being accepted" in text
    assert "# TYPE gpufabric_info gauge\n" in text  # how the text format shows an Info
    assert len(profile.sha256) == 64
    assert _line(text, "gpufabric_info", "1.0", profile="h200-nvswitch-x2", sha256=profile.sha256,
                 plugin_version=pytest_gpufabric.__version__)


# --------------------------------------------------------------------------------------- server, registry


def test_stop_frees_the_port(prom):
    port = _free_port()
    exp = MetricsExporter()
    exp.observe_nvlink(_training_samples()[-1])
    exp.start(port)
    assert exp.serving and exp.port == port
    assert _line(_scrape(port), "gpufabric_nvlink_tx_bytes", "1.58872576e+09", gpu="0", link="0")

    def bind_again() -> None:  # as a server would (SO_REUSEADDR, listen): fails while anyone listens
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()

    with pytest.raises(OSError):
        bind_again()
    with pytest.raises(RuntimeError, match="already serving"):
        exp.start(port)
    exp.stop()
    assert not exp.serving and exp.port is None
    with pytest.raises(urllib.error.URLError):
        _scrape(port)
    bind_again()
    exp.stop()  # twice: nothing to do

    # the same exporter, its metrics kept, serves again on the same port
    exp.start(port)
    try:
        assert _line(_scrape(port), "gpufabric_nvlink_tx_bytes", "1.58872576e+09", gpu="0", link="0")
    finally:
        exp.stop()
    bind_again()


def test_a_taken_port_raises(prom, exporter):
    other = MetricsExporter()
    with pytest.raises(OSError):
        other.start(exporter.port)
    assert not other.serving


def test_two_exporters_share_nothing(prom):
    samples = _training_samples()
    a, b = MetricsExporter(), MetricsExporter()  # same metric names twice: fine in separate registries
    with a, b:
        a.start(_free_port())
        b.start(_free_port())
        assert a.port != b.port
        a.observe_nvlink(samples[0])
        b.observe_nvlink(samples[-1])
        b.observe_test("t::x", "failed")
        text_a, text_b = _scrape(a.port), _scrape(b.port)
    assert samples[0].gpus[0][0].tx_bytes != samples[-1].gpus[0][0].tx_bytes
    va, vb = _values(prom, text_a), _values(prom, text_b)
    key = ("gpufabric_nvlink_tx_bytes", (("gpu", "0"), ("link", "0")))
    assert va[key] == samples[0].gpus[0][0].tx_bytes
    assert vb[key] == samples[-1].gpus[0][0].tx_bytes
    assert 'gpufabric_tests_total{outcome="failed"}' in text_b
    assert "gpufabric_tests_total{" not in text_a
    # and nothing went into the process-wide registry
    assert not [m for m in prom.REGISTRY.collect() if m.name.startswith("gpufabric")]
    assert not a.serving and not b.serving


def test_without_prometheus_client_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import prometheus_client -> ImportError
    with pytest.raises(ImportError, match="pip install prometheus-client for --gpu-metrics-port"):
        MetricsExporter()
    assert INSTALL_HINT == "pip install prometheus-client for --gpu-metrics-port"


def test_importing_the_module_does_not_import_prometheus_client():
    code = ("import sys, pytest_gpufabric.report.metrics; "
            "sys.exit('prometheus_client' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_metrics_port_serves_a_replayed_run(pytester: pytest.Pytester):
    """End to end: --gpu-metrics-port during a replay of the RoCE bundle; a test of the run scrapes it."""
    pytest.importorskip("prometheus_client")
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pytester.makepyfile(
        f"""
        import urllib.request

        def test_scrape(rdma_devices):
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
            text = opener.open("http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            assert 'gpufabric_info{{' in text and 'profile="a100-pcie-roce"' in text
            assert [d.name for d in rdma_devices] == ["irdma0"]
        """
    )
    result = pytester.runpytest_subprocess("--gpu-profile", "a100-pcie-roce", "--gpu-replay", "a100-pcie-roce",
                                           "--gpu-metrics-port", str(port), "-k", "test_scrape",
                                           "test_metrics_port_serves_a_replayed_run.py")
    result.assert_outcomes(passed=1)


def test_metrics_port_in_use_is_a_usage_error(pytester: pytest.Pytester):
    pytest.importorskip("prometheus_client")
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = pytester.runpytest_subprocess("--gpu-profile", "a100-pcie-roce", "--gpu-replay", "a100-pcie-roce",
                                               "--gpu-metrics-port", str(port))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--gpu-metrics-port {port}: *"])
