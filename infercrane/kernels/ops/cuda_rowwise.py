"""What the handwritten CUDA kernels of the row-wise norm ops share on the host: their source (with the shared
device code of ``rowwise.cuh`` put in), the shape of a launch, and one op's compile cache and launch.

* ``read_source(path)``: an op's ``.cu`` with each ``#include "<header>"`` of a header next to this module
  (``rowwise.cuh``) replaced by the header's text, between ``#line`` markers (NVRTC's messages then name the
  right file and line). What NVRTC and CuPy compile is that one text: no ``-I`` for it, and its hash (in the
  kernel's ``describe()`` and CuPy's disk cache) covers the header too.
* ``row_shape(rows, hidden, regimes, ...)``: the configuration every row-wise kernel chooses the same way, from
  the op's ``CUDA_DEFAULTS`` table: 16-byte accesses (``vec`` = 8 elements) whenever the width and the tensors'
  alignment allow, else the widest of 4/2/1 that fits; ``threads_per_row`` so each thread owns about
  ``vectors_per_thread`` vectors of a row; several rows per block when a row needs fewer threads than a block
  holds. The op adds its own keys and its ``-D`` defines (``defines``).
* ``CudaKernel``: one op's kernel on a GPU. The source is compiled through CuPy
  (``infercrane.kernels.ops.nvrtc.load_function``; CuPy targets the device's own ``sm_XY``, adds ``-ftz=true``
  and caches the binary on disk) once per (device, arch, config, dtype), and launched on torch's *current* stream
  with raw ``data_ptr()`` arguments, so it runs in order with torch's work and is captured by
  ``torch.cuda.graph``. Call a kernel once before a capture: compiling and loading a module is not a stream
  operation and must not happen while a graph is captured. ``compile_ptx`` compiles the same source to PTX with
  NVRTC through ``cuda.bindings.nvrtc`` and no GPU: what CPU CI checks.

An op's ``cuda_kernel.py`` keeps its source, its defaults table, what its configuration adds and its calling
contract. numpy and torch are imported inside the functions only.
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Any, Callable

from infercrane.errors import InputError
from infercrane.kernels.ops import nvrtc

HEADERS_DIR = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'#include "([^"/]+)"\s*')
# Most vectors one thread may own in a row (rowwise.cuh's static_assert; at 16, ptxas spills at hidden 1024):
# hidden <= 8 elements * 1024 threads * 8 vectors = 65536.
MAX_VECTORS_PER_THREAD = 8
# Up to this many rows a launch is latency-bound (one wave of blocks); beyond it, bandwidth-bound.
SMALL_ROWS = 2048
SHAPE_KEYS = ("vec", "threads_per_row", "rows_per_block")


def read_source(path: Path) -> str:
    """The CUDA C++ text of ``path`` with each ``#include "<name>"`` of a header in ``HEADERS_DIR`` put in place."""
    out: list[str] = []
    for lineno, line in enumerate(path.read_text().splitlines(keepends=True), 1):
        m = _INCLUDE.fullmatch(line)
        header = HEADERS_DIR / m.group(1) if m else None
        if header is None or not header.is_file():
            out.append(line)
            continue
        text = header.read_text()
        out += [f'#line 1 "{header.name}"\n', text if text.endswith("\n") else text + "\n",
                f'#line {lineno + 1} "{path.name}"\n']
    return "".join(out)


def row_shape(rows: int, hidden: int, regimes: tuple[dict[str, Any], ...], *, align_elems: int,
              overrides: dict[str, Any], config_keys: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(cfg, regime)``: the shape of a launch for ``rows`` x ``hidden`` of a 16-bit dtype, and the row of
    ``regimes`` (an op's ``CUDA_DEFAULTS``) it came from: the first whose ``max_rows`` is >= rows (None: any).

    ``cfg`` holds, in this order, ``hidden``, ``vec`` (elements per access: the largest of 8/4/2/1 dividing
    ``hidden`` and ``align_elems``, the pointers' alignment in elements), ``vec_bytes``, ``threads_per_row`` (next
    power of two >= (hidden / vec) / v, v = the regime's ``vectors_per_thread``; at most 1024),
    ``rows_per_block`` (the regime's ``block_threads`` / ``threads_per_row``, at least 1), ``threads_per_block``,
    ``vectors_per_thread`` and ``guarded`` (the last vector of some threads lies past the row). ``overrides``
    (keys of ``config_keys``: the op's) replace ``vec``, ``threads_per_row`` and ``rows_per_block``; a key outside
    ``config_keys`` or a shape the source cannot compile raises InputError."""
    unknown = sorted(set(overrides) - set(config_keys))
    if unknown:
        raise InputError(f"unknown CUDA config keys {unknown}; known: {list(config_keys)}")
    rows = int(rows)
    hidden = int(hidden)
    if rows < 0 or hidden <= 0:
        raise InputError(f"rows must be >= 0 and hidden > 0, got rows={rows}, hidden={hidden}")
    align_cap = nvrtc.pow2_divisor(max(1, int(align_elems)), 8)
    vec = int(overrides.get("vec") or nvrtc.pow2_divisor(hidden, align_cap))
    if vec not in (1, 2, 4, 8) or hidden % vec:
        raise InputError(f"vec must be 1, 2, 4 or 8 and divide hidden={hidden}, got {vec}")
    nvec = hidden // vec
    regime = next(d for d in regimes if d["max_rows"] is None or rows <= d["max_rows"])
    tpr = overrides.get("threads_per_row")
    target_vpt = int(regime["vectors_per_thread"])
    tpr = int(tpr) if tpr is not None else min(1024, nvrtc.next_pow2(-(-nvec // target_vpt)))
    if tpr <= 0 or tpr & (tpr - 1) or tpr > 1024:
        raise InputError(f"threads_per_row must be a power of two <= 1024, got {tpr}")
    vpt = -(-nvec // tpr)
    if vpt > MAX_VECTORS_PER_THREAD:
        raise InputError(
            f"hidden={hidden} needs {vpt} vectors per thread at threads_per_row={tpr} (max "
            f"{MAX_VECTORS_PER_THREAD}); the CUDA kernel supports hidden <= {8 * 1024 * MAX_VECTORS_PER_THREAD}"
        )
    rpb = overrides.get("rows_per_block")
    rpb = int(rpb) if rpb is not None else max(1, int(regime["block_threads"]) // tpr)
    threads = tpr * rpb
    if rpb <= 0 or threads % 32 or threads > 1024:
        raise InputError(
            f"threads per block (threads_per_row * rows_per_block = {tpr} * {rpb}) must be a multiple of 32 "
            f"and <= 1024"
        )
    cfg: dict[str, Any] = {
        "hidden": hidden,
        "vec": vec,
        "vec_bytes": vec * 2,
        "threads_per_row": tpr,
        "rows_per_block": rpb,
        "threads_per_block": threads,
        "vectors_per_thread": vpt,
        "guarded": bool(nvec % tpr),
    }
    return cfg, regime


def defines(cfg: dict[str, Any]) -> list[str]:
    """The ``-D`` defines of ``rowwise.cuh`` for a ``row_shape`` configuration."""
    return [f"-DIC_HIDDEN={cfg['hidden']}", f"-DIC_VEC={cfg['vec']}", f"-DIC_THREADS_PER_ROW={cfg['threads_per_row']}",
            f"-DIC_ROWS_PER_BLOCK={cfg['rows_per_block']}"]


class CudaKernel:
    """One op's handwritten kernel: its source ``source_path`` (with ``rowwise.cuh`` put in by ``read_source``),
    an entry point per dtype (``entry_points``), the configurations compiled so far (``compiled``, what
    ``describe()`` records) and the launches prepared so far."""

    def __init__(self, source_path: Path, entry_points: dict[str, str]) -> None:
        self.source_path = source_path
        self.entry_points = entry_points
        self.compiled: list[dict[str, Any]] = []
        self._launches: dict[tuple[Any, ...], tuple[Any, tuple[int], tuple[int]]] = {}
        self.read_source = functools.lru_cache(maxsize=1)(lambda: read_source(self.source_path))

    def describe(self) -> dict[str, Any]:
        """What a result records about this implementation: the source's hash (headers put in), options,
        configurations compiled."""
        info: dict[str, Any] = {
            "source": self.source_path.name,
            "source_sha256": hashlib.sha256(self.read_source().encode()).hexdigest(),
            "base_options": list(nvrtc.BASE_OPTIONS),
            "compiled": [dict(c) for c in self.compiled],
            "launch": nvrtc.STREAM_NOTE,
        }
        info.update(nvrtc.toolchain())
        return info

    def compile_ptx(self, cfg: dict[str, Any], arch: str, source: str | None, include_dirs: list[str]) -> str:
        """PTX of the source (or ``source``, to check a variant) for configuration ``cfg`` and ``arch``, compiled by
        NVRTC without a GPU; both entry points are in it. Raises UnavailableError when NVRTC or the CUDA headers
        are missing, CudaCompileError (with the NVRTC log) on a compile error."""
        return nvrtc.compile_ptx_for(self.read_source() if source is None else source, self.source_path.name, arch,
                                     cfg["defines"], include_dirs)

    def function(self, device_index: int, arch: str, cfg: dict[str, Any], dtype: str) -> Any:
        """The compiled entry point for ``cfg`` on ``device_index`` (``nvrtc.load_function``), recorded when
        compiled."""
        entry = self.entry_points[dtype]
        fn, options, compiled_now = nvrtc.load_function(device_index, arch, self.read_source(), self.source_path.name,
                                                        cfg["defines"], entry, nvrtc.BASE_OPTIONS)
        if compiled_now:
            self.compiled.append({"device": device_index, "arch": arch, "dtype": dtype, "options": list(options),
                                  "entry": entry})
        return fn

    def launch(self, tensors: tuple[Any, ...], rows: int, hidden: int, eps: float, config: dict[str, Any] | None,
               configure: Callable[[int, int], dict[str, Any]]) -> None:
        """Launch on ``tensors`` (the entry point's pointer arguments, in order, already checked: one dtype, one
        device, contiguous), then ``rows`` and ``eps``. ``configure(align_elems, num_sms)`` gives the
        configuration the first time a (device, shape, dtype, alignment, ``config``) is launched."""
        import numpy as np
        import torch

        if not eps > 0:
            raise InputError(f"eps must be positive, got {eps}")
        device = tensors[0].device
        if device.type != "cuda":
            raise InputError(f"the CUDA kernel needs CUDA tensors, got {device}")
        if rows == 0:
            return
        if rows >= 2**31:
            raise InputError(f"the CUDA kernel takes fewer than 2**31 rows, got {rows}")
        dtype = str(tensors[0].dtype).removeprefix("torch.")
        device_index = device.index if device.index is not None else torch.cuda.current_device()
        ptrs = tuple(t.data_ptr() for t in tensors)
        align = nvrtc.align_elems(*ptrs)
        key = (device_index, rows, hidden, dtype, align, None if config is None else tuple(sorted(config.items())))
        launch = self._launches.get(key)
        if launch is None:
            arch, num_sms = nvrtc.device_info(device_index)
            cfg = configure(align, num_sms)
            if cfg["vec"] > align:
                raise InputError(f"config vec={cfg['vec']} needs {cfg['vec_bytes']}-byte aligned tensors; these "
                                 f"are aligned to {align * 2} bytes")
            launch = (self.function(device_index, arch, cfg, dtype), (cfg["grid"],), (cfg["threads_per_block"],))
            self._launches[key] = launch
        fn, grid, block = launch
        stream = nvrtc.current_stream(device_index, torch.cuda.current_stream(device).cuda_stream)
        fn(grid, block, (*(np.uint64(p) for p in ptrs), np.int32(rows), np.float32(eps)), stream=stream)
