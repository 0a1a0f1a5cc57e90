"""The state the machine arrives in: what `gpufabric health` reads (NVML and the kernel log live, the bundle's
health.json or its nvml.json with nvidia-smi-q.xml in replay), judged with the health check's own checks and
limits (nodehealth/arrival.py). A machine the health check drains is never ACCEPTED.
"""

from __future__ import annotations

from pytest_gpufabric.kinds.arrival import GPU_HEALTH, XID_EVENTS
from pytest_gpufabric.measurements import REGISTRY
from pytest_gpufabric.nodehealth.arrival import check_gpu_health, check_xid_events
from pytest_gpufabric.promise import promise

_NOTHING_RECORDED = REGISTRY["arrival"].nothing_recorded


@promise(GPU_HEALTH.name)
def test_gpu_health(gpu_profile, fabric, promised_gpu, arrival_health, gpufabric_check):
    gpufabric_check(check_gpu_health(gpu_profile, promised_gpu, arrival_health, _NOTHING_RECORDED))


@promise(XID_EVENTS.name)
def test_xid_events(gpu_profile, fabric, arrival_health, gpufabric_check):
    gpufabric_check(check_xid_events(gpu_profile, arrival_health, _NOTHING_RECORDED, gpus=fabric.gpus))
