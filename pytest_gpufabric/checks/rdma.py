"""RDMA checks: the promised ports are there, up, at their rate and MTU, next to their GPUs; ib_write_bw
reaches the promised fraction of the line rate; the port's counters saw the bytes it sent."""

from __future__ import annotations

import math

from ..fabric.model import Fabric
from ..fabric.rdma import RdmaDevice, RdmaPort, line_rate, port_data_bytes, saturated_data_counters
from ..formats.perftest import row_disagreement
from ..units import format_bytes, is_number, parse_bytes, parse_gbit
from .limits import HIGHER, Limit, figure
from .result import CheckResult, failed, passed, unknown

_PORT_CAUSES = ("Usual causes: a cable or transceiver not seated or of the wrong speed, the switch port "
                "configured differently (speed, MTU, PFC/ECN for RoCE), the subnet manager not running "
                "(InfiniBand: state INIT), or the driver/firmware not loaded (check `ibv_devinfo`, `ibstat`).")
_BW_CAUSES = ("Usual causes: the port trained at a lower speed, MTU or PFC mismatch with the switch (RoCE: "
              "pause frames, ECN), the test bound to the far NUMA node, a single QP at a small message size, or "
              "congestion from other traffic; rerun with more QPs (-q) and check the port counters for errors.")


def find_port(devices: list[RdmaDevice], name: str, number: int) -> tuple[RdmaDevice | None, RdmaPort | None]:
    device = next((d for d in devices if d.name == name), None)
    return device, (device.port(number) if device else None)


def _unparsed(port, key: str) -> str:
    """What sysfs's file for ``key`` said where it did not parse (ibv_devinfo's is never taken in its place)."""
    return f" (sysfs ports/{port.port}/{key} reads {port.raw[key]!r}, not a state)" if key in port.raw else ""


def check_rdma_port(promise: dict, devices: list[RdmaDevice], source: str) -> CheckResult:
    name, number = promise["name"], promise.get("port", 1)
    subject = f"{name} port {number}"
    expected = dict(promise)
    device, port = find_port(devices, name, number)
    if device is None:
        found = ", ".join(d.name for d in devices) or "none"
        return failed("rdma-port", subject, expected, None, f"{subject}: no RDMA device {name} ({source} shows: "
                      f"{found}). " + _PORT_CAUSES)
    if port is None:
        return failed("rdma-port", subject, expected, None, f"{subject}: {name} has no port {number}")
    problems, unjudged = [], []
    if port.state is None:
        unjudged.append("state" + _unparsed(port, "state"))
    elif port.state != "ACTIVE":
        problems.append(f"state {port.state}, expected ACTIVE")
    if port.phys_state is not None and port.phys_state != "LinkUp":
        problems.append(f"physical state {port.phys_state}, expected LinkUp")
    elif port.phys_state is None and "phys_state" in port.raw:
        unjudged.append("physical state" + _unparsed(port, "phys_state"))
    if "link_layer" in promise and port.link_layer != promise["link_layer"]:
        (unjudged if port.link_layer is None else problems).append(
            f"link layer {port.link_layer}, expected {promise['link_layer']}")
    rate, rate_source = line_rate(port)
    if "rate" in promise:
        want = parse_gbit(promise["rate"])
        if rate is None:
            unjudged.append(f"line rate ({rate_source})")
        elif rate < want:
            problems.append(f"line rate {rate:g} Gb/s ({rate_source}), expected {promise['rate']}")
    if "mtu" in promise:
        if port.active_mtu is None:
            unjudged.append("active MTU (not recorded)")
        elif port.active_mtu < promise["mtu"]:
            problems.append(f"active MTU {port.active_mtu}, expected >= {promise['mtu']}")
    if "numa_node" in promise and device.numa_node != promise["numa_node"]:
        (unjudged if device.numa_node is None else problems).append(
            f"NUMA node {device.numa_node}, expected {promise['numa_node']}")
    found = {"state": port.state, "phys_state": port.phys_state, "link_layer": port.link_layer,
             "rate_gbit": rate, "rate_source": rate_source, "active_mtu": port.active_mtu,
             "numa_node": device.numa_node, "fw_ver": device.fw_ver}
    summary = (f"{subject}: {port.state}/{port.phys_state}, {port.link_layer}, "
               f"{f'{rate:g} Gb/s' if rate else 'rate unknown'}, MTU {port.active_mtu}")
    if problems:
        return failed("rdma-port", subject, expected, found, f"{summary}: " + "; ".join(problems) + ". "
                      + _PORT_CAUSES, details=problems)
    if unjudged:
        return unknown("rdma-port", subject, expected, f"{summary}; not judged: " + "; ".join(unjudged)
                       + f" [{source}]")
    return passed("rdma-port", subject, expected, found, summary)


def check_gpu_locality(promise: dict, devices: list[RdmaDevice], fabric: Fabric | None) -> CheckResult:
    """The GPUs the port serves sit on its NUMA node and within PIX/PXB of it (GPUDirect RDMA stays on
    the PCIe switch instead of crossing the CPU)."""
    name = promise["name"]
    subject, gpus = f"{name} and GPU(s) {', '.join(map(str, promise['gpus']))}", promise["gpus"]
    device, _ = find_port(devices, name, promise.get("port", 1))
    if device is None:
        return failed("rdma-locality", subject, gpus, None, f"no RDMA device {name}")
    if fabric is None or not fabric.gpus_recorded:
        return unknown("rdma-locality", subject, gpus, "the GPUs were not recorded")
    nic = next((n for n in fabric.nics if n.device == name), None)
    problems, unjudged, found = [], [], {}
    for index in gpus:
        gpu = f"GPU{index}"
        label = fabric.label(gpu, nic.label) if nic else None
        found[gpu] = {"label": label, "gpu_numa": fabric.numa_affinity.get(gpu), "nic_numa": device.numa_node}
        if label is None:
            unjudged.append(f"{gpu}-{name} path (the topology has no column for {name})")
        elif label not in ("PIX", "PXB"):
            problems.append(f"{gpu}-{name} is {label}: GPUDirect RDMA would cross "
                            + ("the CPU" if label in ("PHB", "NODE") else "the sockets' interconnect"))
        gpu_numa = fabric.numa_affinity.get(gpu)
        if gpu_numa in (None, "N/A") or device.numa_node is None or device.numa_node < 0:
            unjudged.append(f"{gpu} NUMA node")
        elif str(device.numa_node) != str(gpu_numa):
            problems.append(f"{name} on NUMA node {device.numa_node}, {gpu} on {gpu_numa}")
    if problems:
        return failed("rdma-locality", subject, gpus, found, f"{subject}: " + "; ".join(problems) + ". Usual "
                      "causes: the NIC or the GPU in another slot than the design, or a BIOS that hides the PCIe "
                      "switch (ACS).", details=problems)
    if unjudged:
        return unknown("rdma-locality", subject, gpus, f"{subject}: not recorded: " + "; ".join(unjudged))
    return passed("rdma-locality", subject, gpus, found, f"{subject}: " + ", ".join(
        f"{g} {v['label']}, NUMA {v['nic_numa']}" for g, v in found.items()))


#: the test ib_write_bw runs, as perftest titles it ("RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test")
IB_WRITE_BW_TEST = "RDMA_Write"


def bidirectional_promised(settings: dict) -> bool:
    """The profile asks for a bidirectional run (-b among ib_write_bw's extra_args); one-way otherwise."""
    return any(arg in ("-b", "--bidirectional") for arg in settings.get("extra_args") or [])


def _ib_write_bw_not_the_promise(settings: dict, result: dict, device: str | None) -> list[str]:
    """What makes a perftest output no evidence of the promised ib_write_bw run: its test (RDMA_Write, not Read or
    Send), its direction (a bidirectional run adds both directions up), its device."""
    problems = []
    title = result.get("test")
    if not title:
        problems.append("the output does not say which test ran (no 'RDMA_Write BW Test' title)")
    elif title.split()[0] != IB_WRITE_BW_TEST:
        problems.append(f"the output is perftest's {title!r}; the profile promises ib_write_bw ({IB_WRITE_BW_TEST})")
    want_both = bidirectional_promised(settings)
    if title and bool(result.get("bidirectional")) != want_both:
        ran = "bidirectional (both directions added up)" if result.get("bidirectional") else "one-way"
        problems.append(f"the run was {ran}; the profile promises a {'bidirectional' if want_both else 'one-way'} "
                        "run" + ("" if want_both else " (add -b to ib_write_bw.extra_args to promise both ways)"))
    ran_on = result.get("device")
    if not ran_on:
        problems.append("the output does not name its device (no 'Device :' line)")
    elif device and ran_on != device:
        problems.append(f"it ran on {ran_on}; the profile promises ib_write_bw on {device}")
    return problems


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: perftest's ``Link type`` -> the link layer ibv_devinfo and sysfs name
_LINK_TYPES = {"IB": "InfiniBand", "Ethernet": "Ethernet"}


def _port_contradiction(result: dict, bw: float, both: int, port: RdmaPort | None) -> str | None:
    """Why the run's figures are not of ``port`` (the promised port as ibv_devinfo or sysfs recorded it), or None:
    more bandwidth than the port's rate carries (its netdev speed, else the rate the port reports, which a RoCE
    driver may report above the wire's: an upper bound either way), or another link type than the port's."""
    if port is None:
        return None
    rate, rate_source = line_rate(port)
    if rate is None and port.rate_gbit is not None:
        rate, rate_source = port.rate_gbit, f"the rate it reports: {port.rate_text or port.rate_gbit}"
    if rate is not None and bw > rate * both:
        return (f"{bw:.2f} Gb/s is more than the {rate * both:g} Gb/s {port.device} port {port.port} carries"
                f"{' in both directions' if both == 2 else ''} ({rate_source})")
    printed = _LINK_TYPES.get(str(result.get("link_type") or ""))
    if printed and port.link_layer and printed != port.link_layer:
        return (f"perftest ran over Link type {result.get('link_type')}, but {port.device} port {port.port} is "
                f"{port.link_layer}")
    return None


def check_ib_write_bw(settings: dict, result: dict, promised_rate: str | None, source: str,
                      device: str | None = None, port: RdmaPort | None = None) -> CheckResult:
    """Average bandwidth at the promised message size against a fraction of the promised line rate (default 90 %)
    or an absolute floor, once the output is the promised run: RDMA_Write, one-way unless the profile says -b, on the
    promised ``device``, with one reading at that size no higher than the line rate can carry. A row whose figures
    contradict each other (formats.perftest.row_disagreement) or the promised ``port`` as recorded is not judged."""
    rows = result.get("results") or []
    subject = f"ib_write_bw {result.get('device')}"
    floors = []
    if "min" in settings:
        floors.append((parse_gbit(settings["min"]), settings["min"]))
    fraction = settings.get("min_fraction_of_rate", 0.9)
    if promised_rate is not None and ("min_fraction_of_rate" in settings or "min" not in settings):
        rate = parse_gbit(promised_rate)
        floors.append((fraction * rate, f"{fraction:.0%} of the promised {promised_rate} line rate"))
    expected = {"floors_gbit": [f for f, _ in floors], "size": settings.get("size")}
    if not rows:
        return unknown("ib-write-bw", subject, expected, f"{source}: no result rows")
    not_it = _ib_write_bw_not_the_promise(settings, result, device)
    if not_it:
        return unknown("ib-write-bw", subject, expected, f"{source}: not the promised run: " + "; ".join(not_it))
    size = parse_bytes(settings.get("size", "64 KiB"))
    at_size = [r for r in rows if isinstance(r, dict) and r.get("bytes") == size]
    if not at_size:
        sizes = ", ".join(format_bytes(r["bytes"]) for r in rows if isinstance(r, dict) and _number(r.get("bytes")))
        return unknown("ib-write-bw", subject, expected, f"{source}: no row at the promised {format_bytes(size)} "
                                                         f"messages (rows at: {sizes or 'none readable'})")
    if any(r != at_size[0] for r in at_size[1:]):
        return unknown("ib-write-bw", subject, expected, f"{source}: {len(at_size)} rows at {format_bytes(size)} that "
                                                         "disagree: which one was measured is ambiguous")
    best = at_size[0]
    bw = best.get("bw_avg_gbps")
    found = {"bw_avg_gbit": bw, "bytes": best["bytes"], "iterations": best.get("iterations"),
             "msg_rate_mpps": best.get("msg_rate_mpps"), "mtu": result.get("mtu"), "link_type": result.get("link_type"),
             "bidirectional": bool(result.get("bidirectional")), "test": result.get("test")}
    if not floors:
        return unknown("ib-write-bw", subject, expected, "the profile promises neither a line rate nor a floor")
    if not _number(bw) or bw <= 0:
        return unknown("ib-write-bw", subject, expected, f"{source}: the average bandwidth {bw!r} is not a finite "
                                                         "number above 0")
    both = 2 if result.get("bidirectional") else 1  # a bidirectional figure adds both directions up
    summary = (f"{subject}: {bw:.2f} Gb/s average at {format_bytes(best['bytes'])} messages, "
               f"{best.get('iterations')} iterations, MTU {result.get('mtu')}")
    if promised_rate:
        line = parse_gbit(promised_rate) * both
        summary += f" ({bw / line:.0%} of {promised_rate}{' in both directions' if both == 2 else ''})"
        if bw > line:
            return unknown("ib-write-bw", subject, expected, f"{summary} [{source}]: above the {line:g} Gb/s the "
                           "port's line rate can carry: an impossible reading, not judged")
    disagreement = row_disagreement(best, str(result.get("units_printed") or "Gb/sec"), both == 2)
    if disagreement:
        return unknown("ib-write-bw", subject, expected, f"{source}: the row at {format_bytes(best['bytes'])}: "
                       f"{disagreement}; not judged")
    contradiction = _port_contradiction(result, bw, both, port)
    if contradiction:
        return unknown("ib-write-bw", subject, expected, f"{source}: the row at {format_bytes(best['bytes'])}: "
                       f"{contradiction}: not a reading of this port, not judged")
    problems = [f"{bw:.2f} Gb/s < {text}{' in both directions' if both == 2 else ''} ({floor * both:.2f} Gb/s)"
                for floor, text in floors if bw < floor * both]
    if problems:
        return failed("ib-write-bw", subject, expected, found, f"{summary} [{source}]: " + "; ".join(problems)
                      + ". " + _BW_CAUSES, details=problems)
    return passed("ib-write-bw", subject, expected, found, f"{summary} [{source}]")


def ib_write_bw_limits(record: dict) -> list[Limit]:
    """The average bandwidth against the highest of its floors (the promised rate, the fraction of the line rate),
    drawn as a bar; the fleet compares it."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict) or not is_number(found.get("bw_avg_gbit")):
        return []
    floors = [f for f in expected.get("floors_gbit") or [] if is_number(f)]
    bounds = [(max(floors), f"min {max(floors):g} Gb/s")] if floors else []
    return figure("bw_avg_gbit", found["bw_avg_gbit"], bounds, "Gb/s", HIGHER, chart="ib_write_bw",
                  bar=f"ib_write_bw {record.get('subject')}", fleet=True)


def counters_limits(record: dict) -> list[Limit]:
    """The transmit counter's rise against the bytes ib_write_bw sent."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict) or not is_number(found.get("tx_bytes")):
        return []
    sent = expected.get("tx_bytes_at_least")
    bounds = [(sent, f"min {format_bytes(sent)}")] if is_number(sent) else []
    return figure("tx_bytes", found["tx_bytes"], bounds, "bytes", HIGHER)


def check_counters_rise(port_before: RdmaPort | None, port_after: RdmaPort | None, bytes_sent: int,
                        subject: str) -> CheckResult:
    """The port's transmit byte counter rose by at least the payload ib_write_bw reports sending (headers
    make the wire count larger; less means the traffic took another path). A 32-bit counter stuck at its top
    (2^32 - 1) shows nothing: the 64-bit extended counters are read where recorded, else it is not checked."""
    expected = {"tx_bytes_at_least": bytes_sent}
    stuck = sorted({name for port in (port_before, port_after) if port for name in saturated_data_counters(port)})
    if stuck:
        return unknown("rdma-counters", subject, expected, f"{subject}: {', '.join(stuck)} read 4294967295, the top "
                       "of a 32-bit counter, and no 64-bit extended counter (counters_ext/*_64) was recorded: a "
                       "saturated counter shows no traffic either way")
    before = port_data_bytes(port_before) if port_before else None
    after = port_data_bytes(port_after) if port_after else None
    if before is None or after is None:
        return unknown("rdma-counters", subject, expected, f"{subject}: the port's byte counters were not readable")
    tx, rx = after[0] - before[0], after[1] - before[1]
    found = {"tx_bytes": tx, "rx_bytes": rx}
    if tx < 0 or rx < 0:
        return unknown("rdma-counters", subject, expected, f"{subject}: the byte counters went down during the run "
                       f"(TX {tx:+d} B, RX {rx:+d} B): cleared or wrapped, they show nothing")
    if tx >= bytes_sent:
        return passed("rdma-counters", subject, expected, found,
                      f"{subject}: TX counter rose by {format_bytes(tx)} for {format_bytes(bytes_sent)} sent")
    return failed("rdma-counters", subject, expected, found,
                  f"{subject}: TX counter rose by {format_bytes(tx)}, less than the {format_bytes(bytes_sent)} "
                  "ib_write_bw sent: the traffic did not go through this port (another device or port took it, "
                  "or the counter is not the port's).")
