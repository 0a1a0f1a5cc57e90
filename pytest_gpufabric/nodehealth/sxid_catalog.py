"""NVIDIA's SXid catalogue: each NVSwitch error code the nvidia-nvswitch driver logs ("nvidia-nvswitch3: SXid
(PCI:0000:c8:00.0): 12028, ..."), by the class NVIDIA's Fabric Manager User Guide gives it (DU-09883-001 v1.3,
October 2023, appendix "NVSwitch SXid Errors": non-fatal, fatal, always fatal, other notable; read here from the copy
leptonai/gpud keeps of it, components/accelerator/nvidia/sxid/sxid.go at commit 2acd894a, 2026-03-13, 93 codes).

What each class asks for (the guide's recovery): a non-fatal SXid has no impact (NVSwitch hardware corrects it; "Not
Applicable"), except the three in NON_FATAL_RESET whose recovery is a restart or a reset; a fatal one ("Restart the
guest VM to see if the associated NVSwitch comes back up", on bare metal: reset the GPUs and NVSwitches, or reboot)
and an always fatal one ("Restart the host to reset the entire fabric/system") take the board out of service until
then. Host_unhandled_interrupt (10003, "other notable") is always fatal in the guide's words and is filed so.
"""

from __future__ import annotations

NON_FATAL, FATAL, ALWAYS_FATAL, NOTABLE = "non-fatal", "fatal", "always fatal", "other notable"
#: the classes that take the node out of service until the NVSwitches and GPUs are reset (or the host rebooted)
FATAL_CLASSES = (FATAL, ALWAYS_FATAL)
#: non-fatal in the guide, yet its recovery restarts or resets: 11004 ingress invalid ACL and 12028 egress
#: non-posted PRIV error ("Restart the guest VM": traffic stalls and GPU access hangs), 19084 AN1 heartbeat timeout
#: ("Reset all GPUs and all NVSwitches")
NON_FATAL_RESET = frozenset({11004, 12028, 19084})

#: code -> (the guide's class, the error's name as the guide gives it)
SXID_CATALOG: dict[int, tuple[str, str]] = {
    10001: (NOTABLE, "Host_priv_error"),
    10002: (NOTABLE, "Host_priv_timeout"),
    10003: (ALWAYS_FATAL, "Host_unhandled_interrupt"),
    10004: (NOTABLE, "Host_thermal_event_start"),
    10005: (NOTABLE, "Host_thermal_event_end"),
    11001: (FATAL, "ingress invalid command"),
    11004: (NON_FATAL, "Ingress invalid ACL"),
    11009: (FATAL, "ingress invalid VCSet"),
    11012: (NON_FATAL, "Single bit ECC errors"),
    11013: (FATAL, "ingress header DBE"),
    11018: (FATAL, "ingress RID DBE"),
    11019: (FATAL, "ingress RLAN DBE"),
    11020: (FATAL, "ingress control parity"),
    11021: (NON_FATAL, "Single bit ECC errors"),
    11022: (NON_FATAL, "Single bit ECC errors"),
    11023: (NON_FATAL, "Single bit ECC errors"),
    12001: (FATAL, "egress crossbar overflow"),
    12002: (FATAL, "egress packet route"),
    12020: (ALWAYS_FATAL, "egress sequence ID error"),
    12021: (NON_FATAL, "Single bit ECC errors"),
    12022: (FATAL, "egress input ECC DBE error"),
    12023: (NON_FATAL, "Single bit ECC errors"),
    12024: (FATAL, "egress output ECC DBE error"),
    12025: (FATAL, "egress credit overflow"),
    12026: (FATAL, "egress destination request ID error"),
    12027: (FATAL, "egress destination response ID error"),
    12028: (NON_FATAL, "egress nonposted PRIV error"),
    12030: (FATAL, "egress control parity error"),
    12031: (FATAL, "egress credit parity error"),
    12032: (FATAL, "egress flit type mismatch"),
    14017: (FATAL, "TS ATO timeout"),
    15001: (FATAL, "route buffer over/underflow"),
    15006: (FATAL, "route transdone over/underflow"),
    15008: (NON_FATAL, "Single bit ECC errors"),
    15009: (FATAL, "route GLT DBE"),
    15010: (FATAL, "route parity"),
    15011: (NON_FATAL, "Single bit ECC errors"),
    15012: (FATAL, "route incoming DBE"),
    15013: (FATAL, "route credit parity"),
    19047: (FATAL, "NCISOC HDR ECC DBE Error"),
    19048: (FATAL, "NCISOC DAT ECC DBE Error"),
    19049: (NON_FATAL, "Single bit ECC errors"),
    19054: (FATAL, "HDR RAM ECC DBE Error"),
    19055: (NON_FATAL, "Single bit ECC errors"),
    19056: (FATAL, "DAT0 RAM ECC DBE Error"),
    19057: (NON_FATAL, "Single bit ECC errors"),
    19058: (FATAL, "DAT1 RAM ECC DBE Error"),
    19059: (NON_FATAL, "Single bit ECC errors"),
    19060: (FATAL, "CREQ RAM HDR ECC DBE Error"),
    19061: (FATAL, "CREQ RAM DAT ECC DBE Error"),
    19062: (NON_FATAL, "Single bit ECC errors"),
    19063: (FATAL, "Response RAM HDR ECC DBE Error"),
    19064: (FATAL, "Response RAM DAT ECC DBE Error"),
    19065: (NON_FATAL, "Single bit ECC errors"),
    19066: (FATAL, "COM RAM HDR ECC DBE Error"),
    19067: (FATAL, "COM RAM DAT ECC DBE Error"),
    19068: (NON_FATAL, "Single bit ECC errors"),
    19069: (FATAL, "RSP1 RAM HDR ECC DBE Error"),
    19070: (FATAL, "RSP1 RAM DAT ECC DBE Error"),
    19071: (NON_FATAL, "Single bit ECC errors"),
    19084: (NON_FATAL, "AN1 Heartbeat Timeout Error"),
    20001: (NON_FATAL, "TX Replay Error"),
    20009: (NOTABLE, "RX Short Error Rate"),
    20012: (NON_FATAL, "Broken/inconsistent connection"),
    20034: (FATAL, "LTSSM Fault Up"),
    22003: (ALWAYS_FATAL, "Minion Halt"),
    22011: (ALWAYS_FATAL, "Minion exterror"),
    22012: (FATAL, "Minion Link NA interrupt"),
    22013: (NON_FATAL, "Minion Link DLREQ interrupt"),
    23001: (ALWAYS_FATAL, "ingress SRC-VC buffer overflow"),
    23002: (ALWAYS_FATAL, "ingress SRC-VC buffer underflow"),
    23003: (ALWAYS_FATAL, "egress DST-VC credit overflow"),
    23004: (ALWAYS_FATAL, "egress DST-VC credit underflow"),
    23005: (ALWAYS_FATAL, "ingress packet burst error"),
    23006: (ALWAYS_FATAL, "ingress packet sticky error"),
    23007: (ALWAYS_FATAL, "possible bubbles at ingress"),
    23008: (ALWAYS_FATAL, "ingress packet invalid dst error"),
    23009: (ALWAYS_FATAL, "ingress packet parity error"),
    23010: (ALWAYS_FATAL, "ingress SRC-VC buffer overflow"),
    23011: (ALWAYS_FATAL, "ingress SRC-VC buffer underflow"),
    23012: (ALWAYS_FATAL, "egress DST-VC credit overflow"),
    23013: (ALWAYS_FATAL, "egress DST-VC credit underflow"),
    23014: (ALWAYS_FATAL, "ingress packet burst error"),
    23015: (ALWAYS_FATAL, "ingress packet sticky error"),
    23016: (ALWAYS_FATAL, "possible bubbles at ingress"),
    23017: (ALWAYS_FATAL, "ingress credit parity error"),
    24001: (NON_FATAL, "Single bit ECC errors"),
    24002: (NON_FATAL, "Single bit ECC errors"),
    24003: (NON_FATAL, "Single bit ECC errors"),
    24004: (FATAL, "sourcetrack TCEN0 crubmstore DBE"),
    24005: (FATAL, "sourcetrack TCEN0 TD crubmstore DBE"),
    24006: (FATAL, "sourcetrack TCEN1 crubmstore DBE"),
    24007: (FATAL, "sourcetrack timeout error"),
}

#: the host codes after the guide's 10001-10005, as the driver's enum names them (nvswitch_err_type in
#: NVIDIA/open-gpu-kernel-modules src/common/nvswitch/interface/ctrl_dev_nvswitch.h, commit 877fd23c); the guide
#: gives them no class, and the driver logs them without a severity word ("10007, IO failure": the switch's BAR
#: reads 0xBADF, fallen off the bus), so sxid.py drains them as any uncatalogued code not logged Non-fatal
DRIVER_HOST_NAMES: dict[int, str] = {
    10006: "Host_thermal_shutdown",
    10007: "Host_IO_failure",
    10008: "Host_firmware_initialization_failure",
    10009: "Host_firmware_recovery_mode",
    10010: "Host_TNVL_error",
}
