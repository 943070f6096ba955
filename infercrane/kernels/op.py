"""What an op folder declares, so that the harness, isolation, correctness, decision and receipts know no op.

An op is one folder ``infercrane/kernels/ops/<op>/`` with:

* ``spec.py``: a frozen dataclass subclassing ``OpSpec`` (shapes from the model config, byte model, calling
  contracts, input generator, tolerances) bound to the module name ``SPEC``, plus ``DEFAULT_ROWS`` and
  ``BANDWIDTH_ROWS``;
* ``oracle.py``: the float32 reference, which ``OpSpec.oracle`` calls;
* ``candidates.py``: ``KEYS`` and ``implementations()`` (``infercrane.kernels.registry``);
* the candidates and baselines themselves.

Adding an op is one such folder plus one line in ``infercrane.kernels.registry.OPS``.

**Calling contracts.** Every implementation is called with the op's named arguments in a fixed order and follows one
of two contracts, both declared here as data:

* out of place (``RETURNS``): ``fn(*args)`` returns the outputs (one tensor, or a tuple in ``OUTPUTS`` order) and
  leaves every input untouched;
* in place (``IN_PLACE``, vLLM's style): ``fn(*args)`` returns ``None`` and afterwards the buffer named by
  ``writes[output]`` holds each output. A buffer that is not an input (e.g. rms_norm's ``out``) is allocated by the
  harness, filled with NaN.

Scalars (``eps``) are passed by name from the spec. Tensors in ``ROW_TENSORS`` (and every extra buffer) are
``[rows, hidden]``; the others (``weight``) are ``[hidden]``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal

from infercrane.receipts.screen_result import Tolerance

Kind = Literal["baseline", "candidate"]
USER_KEY = "user"  # the key of a user's candidate file
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class Contract:
    """How an implementation is called: argument names in order, and where its outputs end up."""

    args: tuple[str, ...]
    returns: tuple[str, ...] = ()  # out of place: the outputs returned, in order
    writes: dict[str, str] = field(default_factory=dict)  # in place: output name -> the argument buffer holding it

    @property
    def in_place(self) -> bool:
        return bool(self.writes)

    def text(self) -> str:
        call = f"fn({', '.join(self.args)})"
        if self.in_place:
            held = ", ".join(f"{buf} holds {out}" for out, buf in self.writes.items())
            return f"{call} -> None; afterwards {held}"
        ret = self.returns[0] if len(self.returns) == 1 else f"({', '.join(self.returns)})"
        return f"{call} -> {ret}; inputs untouched"


@dataclass(frozen=True)
class OpSpec:
    """One resolved problem of an op: a hidden size, an epsilon, a dtype and the rows to screen.

    Subclasses set the class constants and implement ``make_inputs`` and ``oracle``.
    """

    hidden_size: int
    eps: float
    dtype: str = "bfloat16"
    rows: tuple[int, ...] = (1,)
    num_layers: int | None = None
    model_id: str | None = None
    model_revision: str | None = None
    config_fields: dict[str, Any] = field(default_factory=dict)

    OP_NAME: ClassVar[str]
    OPERATOR: ClassVar[str]
    SEMANTICS: ClassVar[str]
    INPUTS: ClassVar[tuple[str, ...]]
    ROW_TENSORS: ClassVar[tuple[str, ...]]
    OUTPUTS: ClassVar[tuple[str, ...]]
    RETURNS: ClassVar[Contract]
    IN_PLACE: ClassVar[Contract]
    BYTE_MODEL: ClassVar[str]
    CALLS_PER_LAYER: ClassVar[float]
    CALLS_NOTE: ClassVar[str]
    TOLERANCES: ClassVar[dict[str, Tolerance]]

    def __post_init__(self) -> None:
        if self.hidden_size <= 0:
            raise ValueError(f"hidden_size must be positive, got {self.hidden_size}")
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if not self.rows or any(r <= 0 for r in self.rows):
            raise ValueError(f"rows must be positive integers, got {self.rows}")

    # ----------------------------------------------------------------------------------------- what the op is

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes one call must move (``BYTE_MODEL``)."""
        raise NotImplementedError

    @property
    def calls_per_decode_step(self) -> int | None:
        return None if self.num_layers is None else int(round(self.CALLS_PER_LAYER * self.num_layers))

    @property
    def tolerance(self) -> Tolerance:
        return self.TOLERANCES[self.dtype]

    def contract(self, in_place: bool) -> Contract:
        return self.IN_PLACE if in_place else self.RETURNS

    def tensor_shape(self, name: str, rows: int) -> tuple[int, ...]:
        """The shape of the named tensor (an input, an output or a buffer) at ``rows``: a row tensor (one of
        ``ROW_TENSORS``, an output, a buffer) is ``(rows, hidden_size)``, any other input ``(hidden_size,)`` (a
        weight). An op of another shape overrides this; the harness assumes only that a row tensor's first dimension
        is its rows."""
        if name in self.INPUTS and name not in self.ROW_TENSORS:
            return (self.hidden_size,)
        return (rows, self.hidden_size)

    def buffers(self, in_place: bool) -> tuple[str, ...]:
        """Extra row-tensor argument buffers (not inputs) the harness allocates for a contract."""
        return tuple(a for a in self.contract(in_place).args if a not in self.INPUTS and a not in self.scalars())

    def scalars(self) -> dict[str, float]:
        return {"eps": self.eps}

    def make_inputs(self, rows: int, device: Any, seed: int, scale: float) -> dict[str, Any]:
        """Fresh named inputs from ``seed`` on ``device`` (never zeros)."""
        raise NotImplementedError

    def oracle(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The float32 reference outputs, by name, for ``inputs`` (any float dtype)."""
        raise NotImplementedError

    def repeated_reference(self, after: dict[str, Any]) -> dict[str, Any] | None:
        """In place, when a call's writes feed the next call's reads: what the outputs must be after the last of
        several calls, as far as it follows from the buffers' final state ``after`` (by name), by output name;
        None when nothing follows (then only one call can be checked)."""
        return None

    def arguments(self, tensors: dict[str, Any], in_place: bool) -> list[Any]:
        """The positional arguments of a call under a contract, from named tensors and the spec's scalars."""
        scalars = self.scalars()
        return [scalars[a] if a in scalars else tensors[a] for a in self.contract(in_place).args]

    # ----------------------------------------------------------------------------------------- records

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["rows"] = list(self.rows)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "OpSpec":
        data = dict(data)
        data["rows"] = tuple(data["rows"])
        return cls(**data)

    def record(self) -> dict[str, Any]:
        """What a result records about the op and its problem."""
        return {
            "op": self.OP_NAME, "operator": self.OPERATOR, "semantics": self.SEMANTICS,
            "hidden_size": self.hidden_size, "eps": self.eps, "dtype": self.dtype, "num_layers": self.num_layers,
            "model_id": self.model_id, "model_revision": self.model_revision,
            "config_fields": dict(self.config_fields), "byte_model": self.BYTE_MODEL,
            "contracts": {"out_of_place": self.RETURNS.text(), "in_place": self.IN_PLACE.text()},
            "calls_per_decode_step": self.calls_per_decode_step, "calls_per_decode_step_note": self.CALLS_NOTE,
        }

    @classmethod
    def from_model_config(
        cls, config: dict[str, Any], *, rows: tuple[int, ...] | None = None, dtype: str = "bfloat16",
        model_id: str | None = None, model_revision: str | None = None,
    ) -> "OpSpec":
        """Resolve the op's shapes from a Hugging Face style ``config.json`` dict (hidden size, eps, layers); a
        ValueError naming the config field that is missing or not a positive number otherwise."""
        import sys

        if "hidden_size" not in config:
            raise ValueError("model config has no 'hidden_size'")
        eps_key = next((k for k in ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps") if k in config), None)
        if eps_key is None:
            raise ValueError("model config has no 'rms_norm_eps' (nor layer_norm_epsilon/layer_norm_eps)")
        hidden = _positive(config, "hidden_size", int)
        eps = _positive(config, eps_key, float)
        layers = _positive(config, "num_hidden_layers", int) if config.get("num_hidden_layers") is not None else None
        used = {k: config[k] for k in ("hidden_size", "rms_norm_eps", "num_hidden_layers", "torch_dtype") if k in config}
        default_rows = getattr(sys.modules[cls.__module__], "DEFAULT_ROWS")
        return cls(hidden_size=hidden, eps=eps, dtype=dtype, rows=tuple(rows or default_rows),
                   num_layers=layers, model_id=model_id, model_revision=model_revision, config_fields=used)


def _positive(config: dict[str, Any], key: str, kind: type) -> Any:
    """``config[key]`` as a positive ``kind`` (int: a whole number, as JSON writes it); ValueError naming the field."""
    import math

    value = config[key]
    ok = (isinstance(value, int) if kind is int else isinstance(value, (int, float))) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        what = "a positive whole number" if kind is int else "a positive number"
        raise ValueError(f"model config field {key!r} is {value!r}; give {what}")
    return kind(value)


def torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def normal(shape: tuple[int, ...], gen: Any, device: Any, dtype: str, mean: float, std: float) -> Any:
    """``N(mean, std^2)`` drawn in float32 from ``gen`` on ``device``, rounded to ``dtype``."""
    import torch

    return (mean + std * torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)).to(torch_dtype(dtype))


def generator(device: Any, seed: int) -> Any:
    import torch

    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(int(seed))
    return gen


@dataclass(frozen=True)
class Implementation:
    """One way to compute an op, and how to find out whether it can run here.

    ``load(spec)`` returns a callable following the op's calling contract (``in_place`` says which form);
    ``describe()`` returns what loading resolved (library path, version, compile settings) for the record.
    """

    key: str
    label: str
    kind: Kind
    in_place: bool
    source: str
    available: Callable[[], tuple[bool, str]]
    load: Callable[[Any], Callable[..., Any]]
    notes: tuple[str, ...] = ()
    describe: Callable[[], dict[str, str]] = field(default=lambda: {})
    # Whether it can run on CPU tensors (a functional run), and if not why; most GPU kernels cannot.
    runs_on_cpu: Callable[[], tuple[bool, str]] = field(default=lambda: (True, ""))

    def probe(self) -> tuple[bool, str]:
        """``available()``, with an unexpected exception turned into a reason instead of a crash."""
        try:
            ok, reason = self.available()
        except Exception as e:  # a broken toolchain must read as "skipped: why", never as silence
            return False, f"availability probe raised {type(e).__name__}: {e}"
        return bool(ok), "" if ok else (reason or "unavailable (no reason given)")

    def probe_cpu(self) -> tuple[bool, str]:
        """``runs_on_cpu()`` for a functional run on CPU tensors, exceptions turned into reasons."""
        try:
            ok, reason = self.runs_on_cpu()
        except Exception as e:
            return False, f"CPU probe raised {type(e).__name__}: {e}"
        return bool(ok), "" if ok else (reason or "cannot run on CPU tensors")
