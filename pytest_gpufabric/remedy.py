"""What to do next about a promise that failed or was not checked: one remedy class, with the evidence that points
there. Operators of fleets ask exactly this: a health check that blames the GPUs where the image was at fault
sends boards back that were never broken.

The classes, from the cheapest to the dearest:

- SOFTWARE: software or configuration (the driver, the image, a setting, the profile itself);
- RERUN: rerun (noise, an interrupted run, evidence that could not be read: nothing says the hardware is at fault);
- RESET: reset or reboot (a GPU that asks for one: rows pending remapping, a link trained down, a GPU off the bus);
- RESEAT: reseat or recable (a link, a bridge, a riser or a slot: PCIe width, NVLink count, signal-integrity errors);
- RMA: return to the vendor (the board computes wrong results, fails its memory test, cannot remap a row).
"""

from __future__ import annotations

SOFTWARE = "software or configuration"
RERUN = "rerun"
RESET = "reset or reboot"
RESEAT = "reseat or recable"
RMA = "return to the vendor"

#: the classes in the order a technician tries them
CLASSES = (SOFTWARE, RERUN, RESET, RESEAT, RMA)
#: one word each, for a drain reason of 128 characters
SHORT = {SOFTWARE: "software", RERUN: "rerun", RESET: "reset", RESEAT: "reseat", RMA: "rma"}
