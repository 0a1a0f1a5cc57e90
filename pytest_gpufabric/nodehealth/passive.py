"""The passive tier: findings from one health record (record.py) against the baseline (baseline.py). No workload,
nothing set, no torch: a read of NVML and the kernel log, judged.

Each check reads only what it needs; a reading it needs that could not be had is an ``unknown`` finding naming the
file and key (never healthy), a reading the GPU does not have (NVML: NOT_SUPPORTED) is not judged.

Why the PCIe link *width* and not its speed: an idle GPU lowers its link generation to save power and raises it
under load (an H100 between jobs may read gen 1), so an idle gen says nothing; the width does not change with load,
and a narrower one is a seating, riser or retimer fault (checks/topology.py's check_pcie judges it the same way).
"""

from __future__ import annotations

from ..checks.platform import _version_ok
from ..fabric.health import DEFAULT_FORBIDDEN_THROTTLE
from ..fabric.nvml_format import normalize_bus_id
from ..formats.gpu_fabric import COMPLETED, SUCCESS, fabric_problem, rack_fabric_problems
from ..remedy_classes import RERUN, RESEAT, RESET, RMA, SOFTWARE
from .counters import wear_findings
from .derive import NO_KERNEL_LOG
from .finding import DRAIN, UNKNOWN, WARN, Finding
from .model import Baseline
from .peer_memory import peer_memory_findings
from .rdma_ports import rdma_findings
from .record import GpuHealthRecord, NodeHealthRecord
from .sxid import sxid_findings
from .xid_catalog import XID_CATALOG

#: nvmlClocksEventReason* bits (nvml.h) a profile's health.forbid_throttle can name
CLOCK_EVENT_BITS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal_slowdown": 0x20,
                    "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80}
#: a GPU within this many degrees of its slowdown temperature while idle between jobs is shown (warn)
SLOWDOWN_WARN_MARGIN_C = 5
#: Xids younger than this drain (an Xid stays in the kernel log until reboot; a reset board keeps its old lines)
DEFAULT_XID_WINDOW_S = 3600.0
#: Xids that take a node out of service, with the remedy NVIDIA's Xid catalog gives (docs.nvidia.com/deploy/
#: xid-errors, "Resolution Bucket"; dynamic page retirement for 48/63/64); any other recent Xid is shown (warn): the
#: application-level ones (13, 31, 43, 45, 94: restart the application) do not make a node unhealthy
XID_DRAIN = {
    48: (RESET, "double-bit ECC error"),
    63: (RESET, "row remapping or page retirement waits for a reset"),
    64: (RMA, "row remapping or page retirement failed"),
    74: (RESET, "NVLink error"),
    79: (RESET, "fell off the bus"),
    95: (RESET, "uncontained ECC error"),
    119: (RESET, "GSP RPC timeout"),
    120: (RESET, "GSP error"),
    140: (RESET, "unrecovered ECC error"),
    154: (RESET, "the driver asks for a recovery action"),
}
#: every other Xid by the immediate resolution NVIDIA's catalogue gives it (xid_catalog.py): these drain, with this
#: remedy; RESTART_APP, IGNORE, the NVLink5 workflows (decided by the intrinfo bits, not read here) and none: shown
CATALOG_DRAIN = {"RESET_GPU": RESET, "RESTART_BM": RESET, "RESTART_VM": RESET, "CHECK_MECHANICALS": RESEAT,
                 "UPDATE_SWFW": SOFTWARE, "CHECK_UVM": SOFTWARE, "CONTACT_SUPPORT": RMA}
#: nvmlDeviceGpuRecoveryAction_t (nvml.h)
RECOVERY_ACTIONS = {1: "GPU reset", 2: "node reboot", 3: "drain peer-to-peer", 4: "drain and GPU reset",
                    5: "IMEX domain recovery", 6: "bus reset", 7: "system reboot"}


class _Checker:
    """The checks of one record against one baseline: each appends its findings."""

    def __init__(self, node: NodeHealthRecord, baseline: Baseline, xid_window_s: float) -> None:
        self.node, self.baseline, self.profile = node, baseline, baseline.profile
        self.xid_window_s = xid_window_s
        self.findings: list[Finding] = []
        self.notes: list[str] = []

    # -- helpers ------------------------------------------------------------------------------------------------

    def add(self, severity: str, check: str, what: str, gpu: GpuHealthRecord | None = None, remedy: str | None = None,
            detail: str = "", **evidence) -> None:
        evidence.setdefault("source", self.node.source)
        self.findings.append(Finding(check, severity, what, None if gpu is None else gpu.index,
                                     None if gpu is None else gpu.serial, remedy, evidence, detail))

    def value(self, gpu: GpuHealthRecord, key: str, check: str):
        """The reading, or None: an unknown finding where it could not be read, nothing where it does not apply."""
        if key in gpu.values:
            return gpu.values[key]
        if key in gpu.unreadable:
            self.add(UNKNOWN, check, f"{key.replace('_', ' ')} not readable", gpu, RERUN, gpu.unreadable[key],
                     key=key, why=gpu.unreadable[key])
        return None

    def answering(self) -> list[GpuHealthRecord]:
        """The GPUs NVML could read (not lost, with a handle)."""
        return [g for g in self.node.gpus if g.lost is None and "handle" not in g.unreadable]

    def described(self, count: int) -> bool:
        """Whether the record describes every GPU it counts (gpu_count): each one counted and not described is an
        unknown finding of its own (a board announced and not described is never healthy)."""
        node = self.node
        listed = {g.index for g in node.gpus}
        for index in sorted(set(range(count)) - listed):
            self.findings.append(Finding(
                "gpu-record", UNKNOWN, f"counted, not described ({len(listed)} of {count} GPUs)", index, None, RERUN,
                {"gpu_count": count, "described": len(listed), "source": node.source},
                f"{node.source}: gpu_count says {count} GPUs, gpus describes {len(listed)}: GPU{index} is not "
                "described, its health cannot be told"))
        extra = sorted(i for i in listed if i >= count)
        if extra:
            self.add(UNKNOWN, "gpu-record", f"{len(listed)} GPUs described, {count} counted", None, RERUN,
                     f"{node.source}: gpus describes GPU{', GPU'.join(map(str, extra))}, beyond the {count} GPUs "
                     "gpu_count says: the record does not add up", gpu_count=count, described=len(listed))
        return set(range(count)) <= listed and not extra

    # -- the checks ---------------------------------------------------------------------------------------------

    def gpus_present(self) -> None:
        """The GPU count, every accepted board by serial, a GPU off the bus (NVML's GPU_IS_LOST, or on the PCI bus
        and not in NVML)."""
        node, promised = self.node, self.profile.gpu_count
        accepted_at = {b.index: b for b in self.baseline.boards or []}
        for gpu in node.gpus:
            if gpu.lost is not None:
                self.add(DRAIN, "gpu-lost", "fell off the bus", gpu, RESET,
                         "NVML answers GPU_IS_LOST: the GPU no longer answers on the PCI bus (Xid 79). A reset "
                         "(often a reboot) brings it back; a board that falls off again is reseated or returned.",
                         nvml=gpu.lost)
                if gpu.serial is None and gpu.index in accepted_at:  # NVML cannot say; the acceptance saw it there
                    self.findings[-1].serial = accepted_at[gpu.index].serial
                    self.findings[-1].evidence["serial_from"] = self.baseline.accepted_from
            elif "handle" in gpu.unreadable:
                self.add(UNKNOWN, "gpu-handle", "not readable", gpu, RERUN, gpu.unreadable["handle"])
        if "gpu_count" in node.unreadable:
            self.add(UNKNOWN, "gpu-count", "GPU count not readable", None, RERUN, node.unreadable["gpu_count"])
            return
        count = node.gpu_count
        complete = self.described(count)
        nvml_bus = {g.pci_bus_id for g in node.gpus if g.pci_bus_id}
        for bus in [b for b in node.pci_gpus or [] if b not in nvml_bus]:
            if complete and len(nvml_bus) == len(node.gpus):
                self.add(DRAIN, "gpu-not-in-nvml", f"PCI {bus} not in NVML", None, RESET,
                         f"the PCI bus lists an NVIDIA GPU at {bus} that NVML does not: it fell off the bus or its "
                         "driver did not take it (dmesg: Xid 79, RmInitAdapter failed)", pci_bus_id=bus)
            else:  # a GPU the record counts but does not describe, or one whose bus id it lacks, may be that one
                self.add(UNKNOWN, "gpu-record", f"PCI {bus} not matched", None, RERUN,
                         f"{node.source}: pci_gpus lists an NVIDIA GPU at {bus} that no GPU the record describes is "
                         "at, and the record does not describe every GPU it holds (a GPU without its pci_bus_id, "
                         "or one gpu_count counts that gpus lacks): whether NVML has it cannot be told",
                         pci_bus_id=bus)
        if count > promised:
            self.add(UNKNOWN, "gpu-count", f"{count} GPUs, profile has {promised}", None, SOFTWARE,
                     f"{count} GPUs answer NVML where profile {self.profile.name} promises {promised}: the node is "
                     "judged by another machine's profile", found=count, promised=promised)
        boards = self.baseline.boards
        unnamed = [g for g in self.answering() if g.serial is None]
        for gpu in unnamed if boards is not None else []:
            self.add(UNKNOWN, "gpu-serial", "serial not readable", gpu, RERUN,
                     gpu.unreadable.get("serial", f"{self.node.source}: gpus[{gpu.index}].serial is not recorded"))
        if boards is None or unnamed:
            if count < promised:
                self.add(DRAIN, "gpu-count", f"{count} of {promised} GPUs answer", None, RESET,
                         f"NVML counts {count} GPUs, profile {self.profile.name} promises {promised}: a GPU fell "
                         "off the bus or was not enumerated (dmesg: Xid 79)", found=count, promised=promised)
            return
        present = {g.serial: g for g in node.gpus if g.serial}
        accepted = {b.serial for b in boards if b.serial}
        if present and accepted and not accepted & set(present):
            self.add(UNKNOWN, "accepted-boards", "none of the accepted boards here", None, SOFTWARE,
                     f"none of the {len(accepted)} boards of {self.baseline.accepted_from} answers here (this node's "
                     f"serials: {', '.join(sorted(present))}): those results are another machine's",
                     accepted=sorted(accepted), found=sorted(present))
            return
        strangers = sorted((g for s, g in present.items() if s not in accepted), key=lambda g: g.index)
        lost = {g.index for g in node.gpus if g.lost is not None}
        for board in sorted((b for b in boards if b.serial and b.serial not in present and b.index not in lost),
                            key=lambda b: b.index):
            stand_in = next((g for g in strangers if g.index == board.index), None)
            if stand_in is not None:
                self.findings.append(Finding(
                    "board-swapped", DRAIN, f"not the accepted board (serial {board.serial})", board.index,
                    stand_in.serial, RERUN, {"accepted_serial": board.serial, "found_serial": stand_in.serial,
                                             "accepted": self.baseline.accepted_from, "source": node.source},
                    f"GPU{board.index} is serial {stand_in.serial}; the acceptance ({self.baseline.accepted_from}) "
                    f"saw serial {board.serial} there: a board swapped since, which its own acceptance has not seen"))
            else:
                self.findings.append(Finding(
                    "board-missing", DRAIN, f"missing ({count} of {len(boards)} GPUs answer)", board.index,
                    board.serial, RESET, {"accepted": self.baseline.accepted_from, "found_gpus": count,
                                          "source": node.source},
                    f"the board accepted as GPU{board.index} does not answer NVML: it fell off the bus or was not "
                    "enumerated (dmesg: Xid 79); a reset or reboot brings it back, a board that drops again is "
                    "reseated"))
        moved = [g for g in node.gpus if g.serial in accepted and g not in strangers
                 and next(b.index for b in boards if b.serial == g.serial) != g.index]
        for gpu in moved:
            was = next(b.index for b in boards if b.serial == gpu.serial)
            self.add(WARN, "board-moved", f"accepted as GPU{was}", gpu, None,
                     f"NVML numbers this board GPU{gpu.index}; the acceptance saw it as GPU{was}", accepted_index=was)
        if count < promised and not any(f.check in ("board-missing", "gpu-lost") for f in self.findings):
            self.add(DRAIN, "gpu-count", f"{count} of {promised} GPUs answer", None, RESET,
                     f"NVML counts {count} GPUs, profile {self.profile.name} promises {promised}", found=count,
                     promised=promised)

    def board_model(self) -> None:
        """Every GPU the profile's model (as the acceptance's gpu-model check matches it: the profile's model
        within NVML's name): another model is a node judged by another machine's profile, or one rebuilt since."""
        want = self.profile.gpu_model
        if not want:
            return
        for gpu in self.answering():
            if gpu.name is None:
                self.add(UNKNOWN, "board-model", "GPU name not readable", gpu, RERUN,
                         gpu.unreadable.get("name", f"{self.node.source}: gpus[{gpu.index}].name is not recorded"))
            elif want.lower() not in gpu.name.lower():
                short = [n.removeprefix("NVIDIA ") for n in (gpu.name, want)]
                self.add(DRAIN, "board-model", f"{short[0]}, profile has {short[1]}", gpu, SOFTWARE,
                         f"NVML names this GPU {gpu.name}; profile {self.profile.name} promises {want}: the node is "
                         "judged by another machine's profile (give the node's own --profile or --accepted), or "
                         "its boards were changed since the acceptance", found=gpu.name, promised=want)

    def pcie_width(self) -> None:
        want = self.profile.pcie.get("width")
        boards = {b.serial: b for b in self.baseline.boards or [] if b.serial}
        if want is None and not boards:
            self.notes.append("PCIe width not judged: the profile promises none (gpus.pcie.width) and no accepted "
                              "results give one")
            return
        for gpu in self.answering():
            current = self.value(gpu, "pcie_width_current", "pcie-width")
            if current is None:
                continue
            accepted = boards.get(gpu.serial).pcie_width_current if gpu.serial in boards else None
            floor, said = max(((want, "the profile promises"), (accepted, "the acceptance saw")),
                              key=lambda w: w[0] or 0)
            if floor and current < floor:
                self.add(DRAIN, "pcie-width", f"PCIe x{current}, {said} x{floor}", gpu, RESEAT,
                         "a narrower link than the board trained at: the card, a riser or a retimer not seated, or "
                         "a damaged slot (the link width does not change with load; its speed does, and is not "
                         "judged idle)", width_current=current, width_promised=want, width_accepted=accepted,
                         width_max=gpu.values.get("pcie_width_max"), gen_current=gpu.values.get("pcie_gen_current"))

    def nvlinks(self) -> None:
        section = self.profile.nvlink
        want = section.get("links_per_gpu")
        boards = {b.serial: b for b in self.baseline.boards or [] if b.serial}
        if want is None and not any(b.nvlinks_active for b in boards.values()):
            return
        for gpu in self.answering():
            states = self.value(gpu, "nvlink_states", "nvlink-state")
            if states is None:
                if "nvlink_states" in gpu.not_applicable and want:
                    states = []  # NVML refuses link 0: no NVLink at all, where the profile promises some
                else:
                    continue
            active = sum(states)
            down = [link for link, state in enumerate(states) if state != 1]
            accepted = boards.get(gpu.serial).nvlinks_active if gpu.serial in boards else None
            floor = max(want or 0, accepted or 0)
            problem = None
            if active < floor:
                problem = f"{active} of {floor} NVLinks active"
            elif section.get("all_active", True) and want is not None and down:
                problem = f"NVLink {', '.join(map(str, down[:4]))} down"
            if problem:
                self.add(DRAIN, "nvlink-state", problem, gpu, RESET,
                         "a link trained down after errors, or its bridge, cable or NVSwitch tray is not seated: a "
                         "reset retrains it; a link that stays down is reseated (nvidia-smi nvlink -s, -e)",
                         active=active, promised=want, accepted=accepted, links_down=down)

    def ecc(self) -> None:
        promised = self.profile.ecc
        for gpu in self.answering():
            if promised:
                mode = self.value(gpu, "ecc_mode", "ecc-mode")
                if mode == 0:
                    self.add(DRAIN, "ecc-mode", "ECC disabled", gpu, SOFTWARE,
                             "the profile promises ECC on (nvidia-smi -e 1 sets it; it takes a reboot)", ecc_mode=0)
            errors = self.value(gpu, "ecc_uncorrected_volatile", "ecc-uncorrected")
            if errors:
                self.add(DRAIN, "ecc-uncorrected", f"{errors} uncorrectable ECC errors", gpu, RESET,
                         "data was lost since the driver loaded; a reset remaps the row (or retires the page). A board "
                         "that cannot remap goes back to the vendor.", ecc_uncorrected_volatile=errors,
                         ecc_corrected_volatile=gpu.values.get("ecc_corrected_volatile"))

    def memory_repair(self) -> None:
        """Row remapping (Ampere and later) or page retirement (before): waiting for a reset, or failed."""
        for gpu in self.answering():
            has_rows = not any(k.startswith("remapped_rows.") for k in gpu.not_applicable)
            if has_rows:
                pending = self.value(gpu, "remapped_rows.pending", "remapped-rows-pending")
                failure = self.value(gpu, "remapped_rows.failure", "remapped-rows-failure")
                rows = {k.split(".")[1]: v for k, v in gpu.values.items() if k.startswith("remapped_rows.")}
                if failure:
                    self.add(DRAIN, "remapped-rows-failure", "row remapping failed", gpu, RMA,
                             "a memory row could not be remapped: the board has no spare rows left there and goes "
                             "back to the vendor", remapped_rows=rows)
                if pending:
                    self.add(DRAIN, "remapped-rows-pending", "rows pending remapping", gpu, RESET,
                             "an uncorrectable error marked a row for remapping, applied at the next GPU reset (Xid "
                             "63): reset the GPU or reboot", remapped_rows=rows)
                continue
            if any(k.startswith("retired_pages.") for k in gpu.not_applicable):
                continue  # neither: a GPU without ECC memory
            pending = self.value(gpu, "retired_pages.pending", "retired-pages-pending")
            pages = {k.split(".")[1]: v for k, v in gpu.values.items() if k.startswith("retired_pages.")}
            if pending:
                self.add(DRAIN, "retired-pages-pending", "page retirement pending", gpu, RESET,
                         "a page was marked for retirement, applied when the driver reloads: reboot or reset",
                         retired_pages=pages)
            retired = sum(pages.get(k) or 0 for k in ("single_bit_ecc", "double_bit_ecc"))
            if retired:
                self.add(WARN, "retired-pages", f"{retired} retired pages", gpu, None,
                         "pages retired after ECC errors: shown, the board keeps working", retired_pages=pages)

    def clock_events(self) -> None:
        forbidden = (self.profile.data.get("health") or {}).get("forbid_throttle", DEFAULT_FORBIDDEN_THROTTLE)
        for gpu in self.answering():
            mask = self.value(gpu, "clock_event_reasons", "clock-events")
            if mask is None:
                continue
            active = [name for name in forbidden if mask & CLOCK_EVENT_BITS[name]]
            if active:
                self.add(DRAIN, "clock-events", f"clocks held by {', '.join(active)}", gpu, RESEAT,
                         "the GPU slows itself down between jobs: cooling (fans, airflow, a heatsink not seated) or "
                         "power delivery (the power brake is the chassis's signal)", clock_event_reasons=mask,
                         active=active)

    def temperature(self) -> None:
        limit = (self.profile.data.get("health") or {}).get("max_temperature_c")
        for gpu in self.answering():
            temperature = self.value(gpu, "temperature_c", "temperature")
            if temperature is None:
                continue
            slowdown = gpu.values.get("slowdown_temperature_c")
            margin = gpu.values.get("margin_temperature_c")
            evidence = {"temperature_c": temperature, "slowdown_temperature_c": slowdown,
                        "margin_temperature_c": margin, "max_temperature_c": limit}
            if slowdown is not None and temperature >= slowdown:
                self.add(DRAIN, "temperature", f"{temperature:g} C, slowdown at {slowdown:g} C", gpu, RESEAT,
                         "at its own slowdown temperature between jobs: cooling (fans, airflow, a heatsink not "
                         "seated)", **evidence)
            elif slowdown is not None and temperature >= slowdown - SLOWDOWN_WARN_MARGIN_C:
                self.add(WARN, "temperature", f"{temperature:g} C, slowdown at {slowdown:g} C", gpu, None,
                         f"within {SLOWDOWN_WARN_MARGIN_C} C of its slowdown temperature", **evidence)
            elif slowdown is None and margin is not None and margin <= 0:
                self.add(WARN, "temperature", f"{temperature:g} C, at its maximum operating temperature", gpu, None,
                         "NVML's thermal margin is used up", **evidence)
            elif limit is not None and temperature > limit:
                self.add(WARN, "temperature", f"{temperature:g} C, above {limit} C", gpu, None,
                         "above the profile's health.max_temperature_c", **evidence)
            if slowdown is None and "slowdown_temperature_c" in gpu.unreadable:
                self.value(gpu, "slowdown_temperature_c", "temperature")

    def driver(self) -> None:
        spec = self.profile.platform.get("driver")
        accepted = self.baseline.accepted_driver
        if spec is None and accepted is None:
            return
        if "driver_version" in self.node.unreadable:
            self.add(UNKNOWN, "driver", "driver version not readable", None, RERUN,
                     self.node.unreadable["driver_version"])
            return
        found = self.node.driver_version
        if spec is not None:
            ok, want = _version_ok(found, spec)
            if not ok:
                self.add(DRAIN, "driver", f"driver {found}, profile wants {want}", None, SOFTWARE,
                         "the NVIDIA driver is not the one the profile promises", driver_version=found,
                         promised=spec)
                return
        if accepted is not None and accepted != found:
            self.add(WARN, "driver", f"driver {found}, accepted with {accepted}", None, None,
                     "the driver changed since the acceptance", driver_version=found, accepted=accepted)

    def persistence(self) -> None:
        promised = self.profile.platform.get("persistence_mode")
        for gpu in self.answering():
            if promised is None:
                mode = gpu.values.get("persistence_mode")
                if mode == 0:
                    self.add(WARN, "persistence-mode", "persistence mode off", gpu, None,
                             "without it the driver unloads between jobs and every job and health check starts the "
                             "GPU again (nvidia-persistenced, or nvidia-smi -pm 1)", persistence_mode=0)
                continue
            mode = self.value(gpu, "persistence_mode", "persistence-mode")
            if mode is not None and bool(mode) != promised:
                self.add(DRAIN, "persistence-mode", f"persistence mode {'on' if mode else 'off'}", gpu, SOFTWARE,
                         "the profile promises it " + ("on (nvidia-persistenced, or nvidia-smi -pm 1)" if promised
                                                       else "off"), persistence_mode=mode, promised=promised)

    def fabric(self) -> None:
        """NVSwitch and NVL72 machines: every GPU registered with the fabric manager and in the node's one NVLink
        clique, judged by formats/gpu_fabric.py (fabric_problem, rack_fabric_problems) as the acceptance and the rack
        judge it; a GPU without an NVSwitch fabric (Not Supported) is not judged."""
        switch = self.profile.nvlink.get("switch")
        judged: list[GpuHealthRecord] = []
        for gpu in self.answering():
            if "fabric.state" in gpu.not_applicable:
                continue
            if "fabric.state" in gpu.unreadable and not switch:
                continue
            state = self.value(gpu, "fabric.state", "fabric")
            status = self.value(gpu, "fabric.status", "fabric")
            info = gpu.fabric
            if state is None or info is None or not info.supported:
                continue
            if info.unreadable:
                why = next(iter(info.unreadable.values()))
                self.add(UNKNOWN, "fabric", "fabric reading not readable", gpu, RERUN, why, why=why)
                continue
            judged.append(gpu)
            why = fabric_problem(info)
            if why is None:
                continue
            evidence = {"fabric_state": state, "fabric_status": status, "fabric": info.to_json()}
            where = self._tray(gpu)
            if info.state != COMPLETED:
                self.add(DRAIN, "fabric", f"NVSwitch fabric {info.state.lower()}", gpu, SOFTWARE,
                         f"{where}: {why}: is nvidia-fabricmanager running? (systemctl status nvidia-fabricmanager)",
                         **evidence)
            elif info.status not in (SUCCESS, None):
                self.add(DRAIN, "fabric", f"NVSwitch fabric failed: {info.status}", gpu, RESET,
                         f"{where}: {why}: the fabric manager could not register the GPU: see its log; a reset "
                         "registers it again", **evidence)
            else:
                self.add(DRAIN, "fabric", f"NVSwitch {why}", gpu, RESET,
                         f"{where}: {why}: NVLinks of the GPU are down or its routes unhealthy", **evidence)
        by_label = {gpu.label: gpu for gpu in judged}
        _, outside, domain = rack_fabric_problems([(gpu.label, gpu.fabric) for gpu in judged], require_fabric=False)
        for label, why in outside:
            gpu = by_label[label]
            self.add(DRAIN, "fabric", "outside the NVLink clique of its node", gpu, RESET,
                     f"{self._tray(gpu)}: {why}: it cannot reach the other GPUs over NVLink (the fabric manager did "
                     "not place it in the partition; a reset registers it again)", fabric=gpu.fabric.to_json(),
                     node_domain=domain)

    def _tray(self, gpu: GpuHealthRecord) -> str:
        """The GPU and the node (an NVL72 rack's compute tray) it is in, as far as the record names them."""
        return f"{gpu.label} of {self.node.hostname}" if self.node.hostname else gpu.label

    def recovery_action(self) -> None:
        for gpu in self.answering():
            action = self.value(gpu, "recovery_action", "recovery-action")
            if action:
                words = RECOVERY_ACTIONS.get(action, f"action {action}")
                self.add(DRAIN, "recovery-action", f"driver asks for {words}", gpu, RESET,
                         f"NVML's GPU recovery action says {words} (Xid 154)", recovery_action=action)

    def xids(self) -> None:
        log = self.node.kernel_log
        if log.error == NO_KERNEL_LOG:  # a bundle that recorded no kernel log (a DERIVED record): could not tell
            self.add(UNKNOWN, "xid", "kernel log not recorded", None, RERUN,
                     f"Xid events not checked: the record holds no kernel log ({log.error}); record the bundle "
                     "again with gpufabric snapshot, as root (it reads /dev/kmsg)", source=log.source, why=log.error)
            return
        if log.error is not None:  # could not tell: never healthy, and the held Xid drains stay (state.py)
            self.add(UNKNOWN, "xid", "kernel log not readable", None, SOFTWARE,
                     f"Xid events not checked: the kernel log could not be read ({log.error}); run the check as "
                     "root (kernel.dmesg_restrict), with /dev/kmsg in a container", source=log.source, why=log.error)
            return
        by_bus = {g.pci_bus_id[:-2] if g.pci_bus_id else None: g for g in self.node.gpus}
        recent: dict[tuple, list[dict]] = {}
        for xid in log.xids:
            if xid["age_s"] > self.xid_window_s:
                continue
            bus = normalize_bus_id(xid["pci"] + ".0")[:-2]
            recent.setdefault((bus, xid["xid"]), []).append(xid)
        older = sum(1 for x in log.xids if x["age_s"] > self.xid_window_s)
        if older:
            self.notes.append(f"{older} Xid line(s) older than {self.xid_window_s:g} s in the kernel log, not judged "
                              "(a reset or reboot since leaves them there)")
        for (bus, code), lines in sorted(recent.items(), key=lambda item: (item[0][1], item[0][0])):
            gpu = by_bus.get(bus)
            resolution, described = XID_CATALOG.get(code, (None, None))
            remedy, words = XID_DRAIN.get(code) or (CATALOG_DRAIN.get(resolution), described)
            newest = min(lines, key=lambda x: x["age_s"])
            evidence = {"xid": code, "count": len(lines), "pci": newest["pci"], "age_s": newest["age_s"],
                        "line": newest["text"], "window_s": self.xid_window_s, "nvidia_resolution": resolution}
            what = f"Xid {code}" + (f" {words}" if words else "") + (f" x{len(lines)}" if len(lines) > 1 else "")
            if gpu is None:
                what += f" at PCI {newest['pci']}"
            self.add(DRAIN if remedy else WARN, "xid", what, gpu, remedy,
                     f"the kernel logged it {newest['age_s']:.0f} s before the check: {newest['text']}", **evidence)


#: each passive finding's check -> its fault word in the scheduler's reason (output.scheduler_reason: a few
#: characters, since sinfo -R shows 20 of the whole reason)
FAULT_WORDS = {
    "gpu-lost": "lost", "gpu-handle": "handle", "gpu-count": "count", "gpu-not-in-nvml": "offbus",
    "gpu-record": "record", "gpu-serial": "serial", "board-swapped": "swap", "board-missing": "gone",
    "accepted-boards": "notme", "board-model": "model", "pcie-width": "pcie", "nvlink-state": "nvlink",
    "ecc-mode": "eccoff", "ecc-uncorrected": "ecc", "remapped-rows-failure": "rrfail",
    "remapped-rows-pending": "rrpend", "retired-pages-pending": "rppend", "clock-events": "clock",
    "temperature": "temp", "driver": "driver", "persistence-mode": "persist", "fabric": "fabric",
    "recovery-action": "recov", "remap-capacity": "rrfull", "inforom": "inforom", "pcie-replay": "replay",
    "nvlink-crc": "nvlcrc", "nvlink-replay": "nvlrep", "nvlink-recovery": "nvlrec", "ib-port": "ibport",
    "ib-port-flap": "ibflap", "sxid": "sxid", "peer-memory": "peermem",
}
#: the status series of the metrics (metrics.py): each per-GPU check -> the findings' checks it covers
METRIC_GPU_CHECKS = {
    "gpu-present": ("gpu-lost", "gpu-handle", "board-swapped", "board-missing", "gpu-serial", "gpu-record"),
    "board-model": ("board-model",), "pcie-width": ("pcie-width",), "nvlink-state": ("nvlink-state",),
    "ecc-enabled": ("ecc-mode",), "ecc-uncorrected": ("ecc-uncorrected",),
    "memory-repair": ("remapped-rows-pending", "remapped-rows-failure", "retired-pages-pending", "remap-capacity"),
    "clock-events": ("clock-events",), "temperature": ("temperature",), "persistence-mode": ("persistence-mode",),
    "fabric": ("fabric",), "recovery-action": ("recovery-action",), "xid": ("xid",), "inforom": ("inforom",),
    "pcie-replay": ("pcie-replay",), "nvlink-errors": ("nvlink-crc", "nvlink-replay", "nvlink-recovery"),
}
#: and each node-level one
METRIC_NODE_CHECKS = {"gpu-count": ("gpu-count", "gpu-not-in-nvml", "gpu-record"), "accepted-boards": (
    "accepted-boards",), "driver": ("driver",), "xid": ("xid",), "ib-port": ("ib-port",),
    "nvswitch-sxid": ("sxid",), "peer-memory": ("peer-memory",)}
#: node-level checks read from another check's reading: its node-level unknown is theirs (a kernel log not read
#: tells no SXid either)
METRIC_READ_WITH = {"nvswitch-sxid": "xid"}

PASSIVE_CHECKS = ("gpus_present", "board_model", "pcie_width", "nvlinks", "ecc", "memory_repair", "clock_events",
                  "temperature", "driver", "persistence", "fabric", "recovery_action", "xids")


def passive_findings(node: NodeHealthRecord, baseline: Baseline, xid_window_s: float = DEFAULT_XID_WINDOW_S) \
        -> tuple[list[Finding], list[str]]:
    """Every finding of the passive tier, and the notes (what was not judged, and why)."""
    checker = _Checker(node, baseline, xid_window_s)
    for name in PASSIVE_CHECKS:
        getattr(checker, name)()
    worn, worn_notes = wear_findings(node)  # counters.py: remap capacity, corrected ECC, InfoROM
    checker.findings += worn
    checker.notes += worn_notes
    for found, found_notes in (rdma_findings(node, baseline.profile),  # rdma_ports.py: the promised RDMA ports
                               sxid_findings(node, xid_window_s),  # sxid.py: the NVSwitches' SXid lines
                               peer_memory_findings(node, baseline.profile)):  # peer_memory.py: GPUDirect RDMA
        checker.findings += found
        checker.notes += found_notes
    if node.derived:
        checker.notes.append(f"the record is DERIVED, not read from the machine: {node.derived}")
    return checker.findings, checker.notes
