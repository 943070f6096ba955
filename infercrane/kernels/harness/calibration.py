"""Per-run calibration of the device the kernels are timed on.

* **Empty-kernel floor per mode**: a Triton kernel with an empty body on one program (``FLOOR_KERNEL``), timed in
  every requested mode exactly like a kernel under test: what launching a kernel that does nothing costs in that
  mode. Small-row results near it are launch-bound. Without Triton the floor falls back to the dispatcher floor.
* **Dispatcher floor per mode**: torch's ``add_(1.0)`` on a one-element float32 tensor (one elementwise kernel
  launched through PyTorch's dispatcher), timed the same way and kept beside the empty-kernel floor: the cheapest a
  kernel reached through ``torch`` ops gets, which is what eager PyTorch baselines pay per launch.
* **Copy bandwidth**: ``dst.copy_(src)`` of a ``COPY_BYTES`` device buffer; bandwidth = bytes read + bytes written
  (2 x ``COPY_BYTES``) / time, median of ``COPY_SAMPLES`` event-timed copies after a warm-up copy.
* **Device**: name, compute capability, L2 size, SM count, memory, SM clock before and after calibration.

Everything is returned as pydantic data for the receipt.
"""
from __future__ import annotations

import statistics
from typing import Any

from infercrane.kernels.harness.timing import ClockReader, graph_fixed_cost, l2_flush_bytes, time_cell
from infercrane.receipts.screen_result import Calibration, CopyBandwidth, DeviceInfo, TimingBlock  # noqa: F401

COPY_BYTES = 1 << 30  # 1 GiB source + 1 GiB destination: 2 GiB moved per copy
COPY_SAMPLES = 10
FLOOR_KERNEL = "triton: @triton.jit kernel with an empty body, grid (1,), one pointer argument"
DISPATCHER_FLOOR_KERNEL = "torch: one_element_fp32_tensor.add_(1.0) (one elementwise CUDA kernel via the dispatcher)"


def device_info(device: Any) -> DeviceInfo:
    """What the device is; on CPU only the type and the processor name."""
    import platform

    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return DeviceInfo(type=dev.type, name=platform.processor() or platform.machine() or "cpu")
    props = torch.cuda.get_device_properties(dev)
    clock = ClockReader(dev)
    driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        d = pynvml.nvmlSystemGetDriverVersion()
        driver = d.decode() if isinstance(d, bytes) else str(d)
    except Exception:
        driver = None
    return DeviceInfo(
        type="cuda",
        name=str(props.name),
        compute_capability=f"{props.major}.{props.minor}",
        l2_cache_bytes=int(getattr(props, "L2_cache_size", 0) or 0) or None,
        sm_count=int(props.multi_processor_count),
        total_memory_bytes=int(props.total_memory),
        max_sm_clock_mhz=clock.max_mhz,
        torch_cuda=str(torch.version.cuda),
        driver=driver,
    )


def copy_bandwidth(device: Any, nbytes: int = COPY_BYTES, samples: int = COPY_SAMPLES) -> CopyBandwidth:
    """Device-to-device copy bandwidth: (read + written bytes) / event time, ``samples`` copies after one warm-up."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src.fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    out: list[float] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
        out.append(2 * nbytes / seconds / 1e9)
    del src, dst
    torch.cuda.empty_cache()
    return CopyBandwidth(
        method=f"dst.copy_(src) of {nbytes} bytes; (bytes read + bytes written) / CUDA-event time; median of {samples}",
        bytes_per_copy=2 * nbytes, samples_gbps=out, median_gbps=float(statistics.median(out)),
    )


def calibrate(device: Any, modes: list[str] | tuple[str, ...], *, samples: int = 20) -> Calibration:
    """Empty-kernel floor in each of ``modes``, copy bandwidth and device facts, with the SM clock around it all."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError("calibration times a CUDA device; a CPU run is functional only")
    clock = ClockReader(dev)
    before = clock.read_mhz()
    info = device_info(dev)
    tiny = torch.zeros(1, dtype=torch.float32, device=dev)

    def dispatcher_call() -> None:
        tiny.add_(1.0)

    empty_call = _empty_kernel_call(tiny)
    flush = torch.empty(l2_flush_bytes(dev), dtype=torch.uint8, device=dev) if "cold" in modes else None

    def blocks(call: Any) -> list[TimingBlock]:
        return [time_cell(call, mode=m, samples=samples, device=dev, clock=clock, flush=flush) for m in modes]

    dispatcher = blocks(dispatcher_call)
    empty = blocks(empty_call) if empty_call is not None else None
    fixed = graph_fixed_cost(empty_call or dispatcher_call) if "graph" in modes else None
    del flush
    torch.cuda.empty_cache()
    bw = copy_bandwidth(dev)
    after = clock.read_mhz()
    return Calibration(
        device=info, floor_kernel=FLOOR_KERNEL if empty is not None else DISPATCHER_FLOOR_KERNEL,
        floors=empty if empty is not None else dispatcher,
        dispatcher_floor_kernel=DISPATCHER_FLOOR_KERNEL, dispatcher_floors=dispatcher,
        copy_bandwidth=bw, graph_fixed_cost_us=fixed, clock_source=clock.source, clock_before_mhz=before,
        clock_after_mhz=after,
    )


def _empty_kernel(ptr):  # type: ignore[no-untyped-def]  # a Triton kernel: annotations would be read as Triton types
    pass


def _empty_kernel_call(buf: Any) -> Any:
    """A thunk launching an empty Triton kernel on torch's current stream; None without Triton."""
    try:
        import triton
    except ImportError:
        return None
    kernel = triton.jit(_empty_kernel)
    return lambda: kernel[(1,)](buf)
