"""The GPU's state around a measurement: clocks, temperature, power, and whether it throttled.

A kernel timed while the GPU sat at a reduced clock is slower for reasons that are not the
kernel's. NVML (``nvidia-ml-py``) reads the state at the start and the end of each measurement;
a record whose GPU reported a throttle reason other than idling says so. Without NVML (the CPU,
an NPU, a machine without the library) the state is empty and nothing else changes.
"""

from __future__ import annotations

import functools

# NVML throttle-reason bits that mean "the clock was held down", by name. Idle and the
# application-clock setting are left out: they are not a slowdown of running work.
_SLOWDOWNS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}


@functools.lru_cache(maxsize=None)
def _handle(pci_bus_id: str | None, index: int):
    try:
        import pynvml

        pynvml.nvmlInit()
        if pci_bus_id:
            try:
                return pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            except pynvml.NVMLError:
                pass
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no NVML here: the state stays empty
        return None


def _pci_bus_id(index: int) -> str | None:
    """The CUDA device's PCI address, so NVML finds the same GPU whatever CUDA_VISIBLE_DEVICES says."""
    try:
        import torch

        p = torch.cuda.get_device_properties(index)
        return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001 - older torch without the fields: fall back to the index
        return None


def snapshot(kind: str, index: int) -> dict:
    """Clocks (MHz), temperature (C), power (W) and active slowdown reasons now; {} without NVML."""
    if kind != "cuda":
        return {}
    handle = _handle(_pci_bus_id(index), index)
    if handle is None:
        return {}
    import pynvml

    state: dict = {}
    reads = {
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "temp_c": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
    }
    for name, read in reads.items():
        try:
            state[name] = read()
        except Exception:  # noqa: BLE001 - a field this GPU or driver does not report
            pass
    try:
        bits = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        state["slowdowns"] = [name for name, bit in _SLOWDOWNS.items() if bits & bit]
    except Exception:  # noqa: BLE001
        pass
    return state


def around(start: dict, end: dict) -> dict:
    """The record's ``device_state``: both snapshots and whether either reported a slowdown."""
    if not start and not end:
        return {}
    reasons = sorted(set(start.get("slowdowns", [])) | set(end.get("slowdowns", [])))
    return {"start": start, "end": end, "throttled": bool(reasons), "slowdowns": reasons}
