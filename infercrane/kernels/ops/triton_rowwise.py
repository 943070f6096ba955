"""What the Triton kernels of the row-wise norm ops share on the host: availability, the tile heuristic's common
part and a configuration's validation, the calling contract's checks, the compile for a CUDA target without a
GPU, and the launch (through Triton's JIT at a call key's first launch, then through the compiled kernel it
returned: ``TritonKernels.launch_cached``).

Each op keeps its kernel bodies in ``<op>/_triton_source.py`` (undecorated; the device helpers they share are
``_triton_rowwise_source.py``) and names them in a ``TritonKernels``. Its ``triton_kernel.py`` keeps its defaults
table, what its configuration adds and its calling contract.

Triton is imported only when a kernel is compiled or launched; ``available()`` reports why it cannot run. Under
``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (Triton's interpreter), which is how CI checks them
against the oracle. The bodies are wrapped with ``triton.jit`` once per mode (compiled, or interpreted), so a
process can use both.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any, Callable

from infercrane.errors import InputError, UnavailableError
from infercrane.kernels.ops.nvrtc import next_pow2, torch_sees_cuda

# Widest row kept entirely in registers (elements). Beyond it the chunked two-pass kernel runs.
MAX_FUSED_BLOCK_N = 16384
# Chunk width of the two-pass kernel.
CHUNK_BLOCK_N = 4096
# Beyond this many rows a launch is bandwidth-bound: fewer, fatter programs.
MANY_ROWS = 2048
# Keys a configuration may carry besides its own: what ``finish`` derives.
DERIVED_KEYS = ("grid", "masked", "int64_offsets", "hidden")
HELPERS = "infercrane.kernels.ops._triton_rowwise_source"
# Compiled launches an op keeps (``TritonKernels.launch_cached``), one per call key; past it new keys go through the JIT.
MAX_CACHED_LAUNCHES = 4096
_POINTER_TYPES = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}


def interpret() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for Triton's CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def available() -> tuple[bool, str]:
    """(True, "") when Triton imports and there is a CUDA device or ``TRITON_INTERPRET=1``."""
    try:
        importlib.import_module("triton")
    except Exception as e:  # ImportError, or a broken install raising something else
        return False, f"triton is not importable: {type(e).__name__}: {e}"
    if interpret():
        return True, ""
    return torch_sees_cuda("no CUDA device visible to torch (set TRITON_INTERPRET=1 to run on CPU tensors)")


def pick(rows: int, hidden: int, regimes: tuple[dict[str, Any], ...], *,
         max_rows_per_program: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(cfg, regime)``: the tile for ``rows`` x ``hidden`` and the row of ``regimes`` (an op's
    ``TRITON_DEFAULTS``) it came from, the first whose ``max_rows`` is >= rows (None: any).

    * ``block_n``: next power of two >= ``hidden`` (``variant="fused"``), or ``CHUNK_BLOCK_N`` for rows wider than
      ``MAX_FUSED_BLOCK_N`` (``variant="chunked"``, 8 warps; no regime: ``None``).
    * ``rows_per_program``: the regime's ``tile_elems // block_n``, in [1, ``max_rows_per_program``].
    * ``num_warps`` = tile elements / (32 threads * the regime's ``elems_per_thread``), clamped to [1, 16].
    """
    rows = int(rows)
    hidden = int(hidden)
    if rows < 0 or hidden <= 0:
        raise InputError(f"rows must be >= 0 and hidden > 0, got rows={rows}, hidden={hidden}")
    block_n = next_pow2(hidden)
    if block_n > MAX_FUSED_BLOCK_N:
        return {"variant": "chunked", "block_n": CHUNK_BLOCK_N, "rows_per_program": 1, "num_warps": 8}, None
    regime = next(d for d in regimes if d["max_rows"] is None or rows <= d["max_rows"])
    rows_per_program = max(1, min(max_rows_per_program, int(regime["tile_elems"]) // block_n))
    tile = rows_per_program * block_n
    num_warps = max(1, min(16, tile // (32 * int(regime["elems_per_thread"]))))
    return {"variant": "fused", "block_n": block_n, "rows_per_program": rows_per_program,
            "num_warps": num_warps}, regime


def finish(cfg: dict[str, Any], rows: int, hidden: int, *, config_keys: tuple[str, ...],
           flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """Validate a (possibly user-given) config against ``config_keys`` (the op's) and return it in full:
    ``variant``, ``block_n``, ``rows_per_program``, ``num_warps``, ``round_by_bits``, each of ``flags`` (the op's own
    booleans, False unless given), then the derived ``hidden``, ``grid`` (programs launched) and ``masked``. The op
    adds ``int64_offsets``, its rule. Raises InputError naming the problem."""
    unknown = sorted(set(cfg) - set(config_keys) - set(DERIVED_KEYS))
    if unknown:
        raise InputError(f"unknown Triton config keys {unknown}; known: {list(config_keys)}")
    variant = cfg.get("variant", "fused")
    if variant not in ("fused", "chunked"):
        raise InputError(f"Triton config variant must be 'fused' or 'chunked', got {variant!r}")
    for name in ("block_n", "num_warps"):
        if name not in cfg:
            raise InputError(f"Triton config needs {name!r}; known keys: {list(config_keys)}")
    block_n = int(cfg["block_n"])
    rpp = int(cfg.get("rows_per_program", 1))
    num_warps = int(cfg["num_warps"])
    for name, v in (("block_n", block_n), ("rows_per_program", rpp), ("num_warps", num_warps)):
        if v <= 0 or v & (v - 1):
            raise InputError(f"Triton config {name} must be a positive power of two, got {v}")
    if num_warps > 32:
        raise InputError(f"Triton config num_warps must be <= 32, got {num_warps}")
    if variant == "fused" and block_n < hidden:
        raise InputError(f"fused Triton config needs block_n >= hidden ({hidden}), got {block_n}")
    if variant == "chunked" and rpp != 1:
        raise InputError("chunked Triton config handles one row per program (rows_per_program=1)")
    out: dict[str, Any] = {"variant": variant, "block_n": block_n, "rows_per_program": rpp, "num_warps": num_warps,
                           "round_by_bits": bool(cfg.get("round_by_bits", False))}
    out |= {name: bool(cfg.get(name, False)) for name in flags}
    out["hidden"] = hidden
    out["grid"] = -(-rows // rpp)
    out["masked"] = bool(variant == "chunked" or block_n != hidden or rows % rpp != 0)
    return out


def check_inputs(tensors: dict[str, Any], weight: Any, supported: tuple[str, ...]) -> tuple[int, int]:
    """Validate an in-place call: ``tensors`` (by name, ``x`` among them) are the ``[..., hidden]`` row tensors,
    ``weight`` is ``[hidden]``; one shape, one dtype of ``supported``, one device, contiguous. Returns ``(rows,
    hidden)``; raises InputError naming the problem."""
    x = tensors["x"]
    if x.dim() < 1:
        raise InputError("x must have at least one dimension [..., hidden]")
    shapes = [tuple(t.shape) for t in tensors.values()]
    if len(set(shapes)) > 1:
        raise InputError(f"{' and '.join(tensors)} must have the same shape, got {' and '.join(map(str, shapes))}")
    hidden = int(x.shape[-1])
    if hidden == 0:
        raise InputError("hidden size must be positive")
    if weight.dim() != 1 or int(weight.shape[0]) != hidden:
        raise InputError(f"weight must have shape [{hidden}], got {tuple(weight.shape)}")
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in supported:
        raise InputError(f"dtype must be one of {supported}, got {dtype}")
    every = {**tensors, "weight": weight}
    names = f"{', '.join(list(every)[:-1])} and weight"
    if any(t.dtype != x.dtype for t in every.values()):
        raise InputError(f"{names} must share one dtype, got {', '.join(str(t.dtype) for t in every.values())}")
    if any(t.device != x.device for t in every.values()):
        raise InputError(f"{names} must be on one device, got {', '.join(str(t.device) for t in every.values())}")
    for name, t in every.items():
        if not t.is_contiguous():
            raise InputError(f"{name} must be contiguous (call .contiguous() first)")
    return int(x.numel()) // hidden, hidden


def launch_key(tensors: tuple[Any, ...]) -> tuple[Any, ...]:
    """What the contract's checks and Triton's choice of compiled kernel read of a launch's tensors: each one's
    shape, dtype, device index, contiguity and 16-byte alignment (Triton specializes a pointer on it). Two calls
    with one key pass the same checks and run the same compiled kernel at the same grid."""
    return tuple([(t.shape, t.dtype, t.get_device(), t.is_contiguous(), t.data_ptr() & 15) for t in tensors])


def _hooked(hook: Any) -> bool:
    """Whether one of Triton's launch hooks would call anything: not None, and (Triton 3.5 and later: a chain of
    hooks, never None) not an empty chain."""
    return hook is not None and bool(getattr(hook, "calls", True))


def ordered_arguments(jit_fn: Any, positional: tuple[Any, ...], keywords: dict[str, Any]) -> tuple[Any, ...]:
    """Every argument of ``jit_fn`` after ``positional``, in its signature's order: what Triton's JIT binds and
    passes on to the compiled kernel's launcher (constants included; launch options such as ``num_warps`` are not
    arguments). A parameter not given takes its default."""
    return tuple(keywords[p.name] if p.name in keywords else p.default for p in jit_fn.params[len(positional):])


@functools.lru_cache(maxsize=8)
def _jitted(source: str, bodies: tuple[str, ...], interpreted: bool) -> tuple[Any, ...]:
    """The bodies of module ``source`` wrapped with ``triton.jit``, once per mode: ``triton.jit`` reads
    ``TRITON_INTERPRET`` when it wraps, and the cache key ``interpreted`` mirrors that."""
    import triton

    module = importlib.import_module(source)
    return tuple(triton.jit(getattr(module, name), do_not_specialize=["n_rows"]) for name in bodies)


def _file(module: str) -> Path:
    """The file of ``module``, found without running it (it imports Triton)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"{module} is not found")
    return Path(spec.origin)


class TritonKernels:
    """One op's Triton kernels: the module ``source`` of its undecorated bodies, the fused body ``rows_body`` (whole
    rows in registers, several per program) and ``chunked_body`` (one row per program, two passes), the dtypes they
    take, and the op's configuration: ``heuristic(rows, hidden)`` (its ``triton_config``, cached per shape) unless a
    call gives its own, which ``finish(config, rows, hidden)`` validates and completes.

    Every body's arguments are its pointers (``*_ptr``, 16-byte aligned), ``n_rows``, ``eps``, then compile-time
    constants: ``HIDDEN``, ``BLOCK_N``, ``INT64``, ``ROUND_BY_BITS`` and, for the fused body, ``ROWS``, ``MASKED``
    and the op's own: ``rows_constants(cfg)`` when compiled here, ``rows_arguments(cfg, interpreted)`` at a
    launch (which may add launch options)."""

    def __init__(self, source: str, rows_body: str, chunked_body: str, dtypes: tuple[str, ...], *,
                 heuristic: Callable[[int, int], dict[str, Any]],
                 finish: Callable[[dict[str, Any], int, int], dict[str, Any]],
                 rows_constants: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 rows_arguments: Callable[[dict[str, Any], bool], dict[str, Any]] | None = None) -> None:
        self.source, self.rows_body, self.chunked_body, self.dtypes = source, rows_body, chunked_body, dtypes
        self._heuristic = functools.lru_cache(maxsize=4096)(lambda rows, hidden: tuple(heuristic(rows, hidden).items()))
        self._finish = finish
        self._rows_constants = rows_constants or (lambda cfg: {})
        self._rows_arguments = rows_arguments or (lambda cfg, interpreted: {})
        # launch_cached: (current device, launch_key) -> (run, function, packed metadata, grid, rows, constants), and
        # Triton's hooks and device/stream functions, bound at the first entry
        self._launches: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._runtime: tuple[Any, Callable[[], int], Callable[[int], int]] | None = None

    def config(self, rows: int, hidden: int, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """The configuration of a call: the heuristic's for the shape, or ``config`` validated and completed."""
        return dict(self._heuristic(rows, hidden)) if config is None else self._finish(dict(config), rows, hidden)

    def describe(self) -> dict[str, Any]:
        """What a result records about this implementation: Triton's version, the sources' hash (the bodies' module
        and the shared helpers it calls), the mode."""
        files = [_file(self.source), _file(HELPERS)]
        info: dict[str, Any] = {
            "source": " + ".join(f.name for f in files),
            "source_sha256": hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest(),
            "interpret": interpret(),
            "max_fused_block_n": MAX_FUSED_BLOCK_N,
            "launch": "torch.cuda.current_stream(); a call key's first launch through Triton's JIT, later ones "
                      "through the compiled kernel it returned (launch_cached)",
        }
        try:
            info["triton"] = importlib.import_module("triton").__version__
        except Exception as e:
            info["triton"] = f"unavailable: {type(e).__name__}"
        return info

    def compile_ptx(self, hidden: int, rows: int, arch: int, dtype: str, config: dict[str, Any] | None) -> str:
        """PTX of the kernel for ``rows`` x ``hidden`` on ``sm_<arch>`` at ``self.config(rows, hidden, config)``,
        compiled without a GPU.

        Runs Triton's full compile (its bundled ``ptxas`` included) for a CUDA target, with the specializations a
        launch on 16-byte aligned tensors gets. Raises InputError for a dtype the kernels do not take or a bad
        ``config``, UnavailableError when this Triton cannot compile for that target without a device.
        """
        if dtype not in self.dtypes:
            raise InputError(f"dtype must be one of {self.dtypes}, got {dtype}")
        cfg = self.config(rows, hidden, config)
        try:
            import triton
            from triton.backends.compiler import GPUTarget
            from triton.compiler import ASTSource
            from triton.runtime.jit import JITFunction

            module = importlib.import_module(self.source)
            constants: dict[str, Any] = {"HIDDEN": hidden, "BLOCK_N": cfg["block_n"], "INT64": cfg["int64_offsets"],
                                         "ROUND_BY_BITS": bool(cfg["round_by_bits"] and dtype == "bfloat16")}
            if cfg["variant"] == "fused":
                fn = JITFunction(getattr(module, self.rows_body), do_not_specialize=["n_rows"])
                constants |= {"ROWS": cfg["rows_per_program"], "MASKED": cfg["masked"], **self._rows_constants(cfg)}
            else:
                fn = JITFunction(getattr(module, self.chunked_body), do_not_specialize=["n_rows"])
            scalars = {"n_rows": "i32", "eps": "fp32"}
            signature = {name: _POINTER_TYPES[dtype] if name.endswith("_ptr") else scalars.get(name, "constexpr")
                         for name in fn.arg_names}
            aligned = [["tt.divisibility", 16]]
            attrs = {(i,): aligned for i, name in enumerate(fn.arg_names) if name.endswith("_ptr")}
            compiled = triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", arch, 32),
                                      # enable_fp_fusion: what a launch gets by default, said explicitly
                                      options={"num_warps": cfg["num_warps"], "enable_fp_fusion": True})
            return compiled.asm["ptx"]
        except (ImportError, AttributeError, TypeError, KeyError) as e:
            raise UnavailableError(f"Triton {getattr(triton, '__version__', '?')} cannot compile for sm_{arch} here: "
                                   f"{type(e).__name__}: {e}") from e

    def launch_cached(self, tensors: tuple[Any, ...], eps: float) -> bool:
        """Launch on ``tensors`` through the compiled kernel a checked launch with the same ``launch_key`` (on the
        same current device, at the heuristic's configuration) went to, and say True; False, launching nothing, for a
        key not launched yet, a non-positive ``eps``, or while one of Triton's launch hooks would run (a
        profiler's: the JIT path calls them). Skips the contract's checks (the key decides them), the configuration
        lookup, and Triton's argument binding and cache lookup: the host's cost of a repeat call
        (benchmarks/host_cost_probe.py)."""
        launches = self._launches
        if not launches:
            return False
        hooks, device_of, stream_of = self._runtime
        if _hooked(hooks.launch_enter_hook) or _hooked(hooks.launch_exit_hook):
            return False
        device = device_of()
        try:
            entry = launches.get((device, launch_key(tensors)))
        except AttributeError:  # not tensors: the checks say what is wrong
            return False
        if entry is None or not eps > 0:
            return False
        run, function, packed, grid, rows, constants = entry
        run(grid, 1, 1, stream_of(device), function, packed, None, None, None, *tensors, rows, float(eps), *constants)
        return True

    def _keep(self, compiled: Any, jit_fn: Any, tensors: tuple[Any, ...], rows: int, grid: int,
              keywords: dict[str, Any]) -> None:
        """Remember the compiled kernel a heuristic-configured launch on CUDA tensors went to (``launch_cached``)."""
        if compiled is None or len(self._launches) >= MAX_CACHED_LAUNCHES or not hasattr(compiled, "packed_metadata"):
            return
        if self._runtime is None:
            try:
                from triton import knobs
                from triton.runtime.driver import driver
            except ImportError:  # a Triton before 3.4 (no knobs): every launch through the JIT
                return
            self._runtime = (knobs.runtime, driver.active.get_current_device, driver.active.get_current_stream)
        device = self._runtime[1]()
        constants = ordered_arguments(jit_fn, (*tensors, rows, 0.0), keywords)
        self._launches[(device, launch_key(tensors))] = (compiled.run, compiled.function, compiled.packed_metadata,
                                                         grid, rows, constants)

    def launch(self, tensors: tuple[Any, ...], rows: int, hidden: int, eps: float,
               config: dict[str, Any] | None) -> None:
        """Launch on ``tensors`` (the bodies' pointer arguments, in order, already checked: one dtype, one device),
        then ``rows`` and ``eps``, at ``self.config(rows, hidden, config)``. Does nothing for zero rows. A compiled
        launch at the heuristic's configuration is remembered for ``launch_cached``."""
        import torch

        if not eps > 0:
            raise InputError(f"eps must be positive, got {eps}")
        if rows == 0:
            return
        interpreted = interpret()
        device = tensors[0].device
        if device.type != "cuda" and not interpreted:
            raise InputError(f"the Triton kernel needs CUDA tensors (got {device}); set TRITON_INTERPRET=1 for CPU")
        cfg = self.config(rows, hidden, config)
        rows_kernel, chunked_kernel = _jitted(self.source, (self.rows_body, self.chunked_body), interpreted)
        grid = (cfg["grid"],)
        # The interpreter truncates on a float32 -> bf16 cast; integer RNE gives what cvt.rn gives on a GPU.
        round_by_bits = tensors[0].dtype == torch.bfloat16 and (interpreted or cfg["round_by_bits"])
        common = {"HIDDEN": hidden, "BLOCK_N": cfg["block_n"], "INT64": cfg["int64_offsets"],
                  "ROUND_BY_BITS": round_by_bits, "num_warps": cfg["num_warps"]}
        if cfg["variant"] == "fused":
            jit_fn = rows_kernel
            keywords = {"ROWS": cfg["rows_per_program"], "MASKED": cfg["masked"], **common,
                        **self._rows_arguments(cfg, interpreted)}
        else:
            jit_fn, keywords = chunked_kernel, common
        compiled = jit_fn[grid](*tensors, rows, float(eps), **keywords)
        if config is None and not interpreted:
            self._keep(compiled, jit_fn, tensors, rows, grid[0], keywords)
