"""The kernel screen's result: one set of pydantic models, data apart from the machinery that fills them.

Everything a screen measured, as measured: the op and its problem (``SpecRecord``), each implementation with its
status and reason (``ImplementationResult``), its correctness checks (``CorrectnessResult``), every timing cell's raw
samples per trial with calls per sample, clocks, rejected samples, sizing and the second timer's figure
(``TimingCell`` / ``TimingBlock``), the device calibration (``Calibration``) and the comparisons
(``Comparison``). The harness fills them (``runner``, ``timing``, ``correctness``, ``calibration``, ``compare``);
the receipt carries them whole and hashed; ``decide`` reads them, so deciding again is loading and deciding again.
They are receipt data, so they live among the receipts; an op's tolerances (``Tolerance``) and a graph's placement
(``PlacementCondition``, ``Levels``) are declared here for the same reason.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.receipts.base import AwareDatetime, Strict
from infercrane.decide.failures import FAILURE_WORDS, Failure  # noqa: F401  (re-exported with the result model)
from infercrane.decide.kernel import FamilyMark, FlagRule  # noqa: F401  (FamilyMark: a comparison's)
from infercrane.decide.policy import TimingMode
from infercrane.stats.compare import Verdict
from infercrane.stats.summary import Summary
from infercrane.stats.trials import TrialSpeedup

SCREEN_RESULT_SCHEMA = "infercrane.kernel-screen-result/v2"
Mode = TimingMode
Phase = Literal["eager", "reuse", "graph"]
Status = Literal["ok", "failed", "skipped"]
CHECKED_BY = "InferCrane's own process, from the bytes the implementation's worker handed back (not its reply)"
COMPARISON_RULE = "|got - ref| <= atol + rtol * |ref| elementwise, atol = atol_scale * rms(ref); NaN/inf never pass"


class Tolerance(Strict):
    """``|got - ref| <= atol + rtol * |ref|`` with ``atol = atol_scale * rms(ref)`` of the tensor compared."""

    dtype: str
    rtol: float = Field(gt=0)
    atol_scale: float = Field(gt=0)
    rule: str = COMPARISON_RULE
    derivation: str


class PlacementCondition(BaseModel):
    """The conditions one timed graph was captured under."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0, description="trial * graphs_per_trial + graph")
    pad_bytes: int = Field(ge=0, description="device bytes allocated before the inputs and held while timing")
    freed: int = Field(ge=0, description="tiny graphs captured and freed right before the timed capture")
    kept: int = Field(ge=0, description="tiny graphs captured before the timed capture and kept alive while timing")


class Levels(BaseModel):
    """Per-graph figures split at their widest relative gap, when it exceeds ``gap``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: int = Field(ge=1, le=2)
    widest_gap: float | None = Field(default=None, description="largest relative step between sorted figures")
    low_n: int | None = None
    low_median_us: float | None = None
    high_n: int | None = None
    high_median_us: float | None = None


class DeviceInfo(Strict):
    type: str
    name: str
    compute_capability: str | None = None
    l2_cache_bytes: int | None = None
    sm_count: int | None = None
    total_memory_bytes: int | None = None
    max_sm_clock_mhz: int | None = None
    torch_cuda: str | None = None
    driver: str | None = None


class CopyBandwidth(Strict):
    method: str
    bytes_per_copy: int = Field(description="bytes read + bytes written by one copy")
    samples_gbps: list[float]
    median_gbps: float


class GraphPlacement(Strict):
    """One timed graph of a graph-mode block: the placement condition it was captured under and its samples."""

    condition: PlacementCondition
    first_sample: int = Field(ge=0, description="index of its first sample in the block's samples_us")
    samples: int = Field(ge=1, description="its samples: samples_us[first_sample : first_sample + samples]")
    input_offset_mod_2mib: int | None = Field(None, description="first input's device address modulo 2 MiB")


class TimedCheck(Strict):
    """The outputs of the timed calls, checked by InferCrane's process after the timed block (``verify``)."""

    seed: int = Field(description="seed of the fresh inputs written into the timed buffers before the check run")
    calls: int = Field(ge=1, description="calls the check run made: the timed object run once as it was timed")
    method: str
    passed: bool
    contract_error: str | None = None
    tensors: list[TensorCheck] = Field(default_factory=list)

    def failure_summary(self) -> str:
        if self.contract_error:
            return f"timed outputs (seed {self.seed}): {self.contract_error}"
        bad = next((t for t in self.tensors if not t.passed), None)
        if bad is None:
            return ""
        return (f"timed outputs (seed {self.seed}, {self.calls} calls): {bad.name}: {bad.mismatched}/{bad.numel} "
                f"elements out of tolerance ({bad.nonfinite} NaN/inf), max abs err {bad.max_abs_err}, first bad "
                f"(row, col) {bad.first_bad_index}")


class TimingBlock(Strict):
    """The raw samples of one implementation x rows x mode in one trial."""

    mode: Mode
    trial: int = Field(ge=0)
    calls_per_sample: int = Field(ge=1)
    warmup_calls: int = Field(ge=0)
    samples_us: list[float] = Field(description="time per call of each sample, microseconds")
    sample_clock_mhz: list[int | None]
    host_samples_us: list[float] | None = Field(
        None, description="launch mode: the host's time per call of each sample, microseconds, read around the same "
                          "burst as samples_us (the result's host_method), one per sample; None in graph and cold mode "
                          "and in results from before it was measured")
    rejected: list[int] = Field(default_factory=list, description="indices of samples rejected as throttled")
    clock_before_mhz: int | None
    clock_after_mhz: int | None
    clock_source: str
    throttled: bool
    outputs_finite: bool | None = Field(description="in-place buffers all finite after the cell; None if out of place")
    l2_flush_bytes: int | None = None
    sizing: str | None = Field(None, description="how calls_per_sample was chosen")
    graph_fixed_cost_us: float | None = Field(None, description="graph mode: the replay's fixed cost this trial "
                                              "used: in the first trial max(the calibration's, this cell's own "
                                              "intercept over graphs of 16 and 32 calls), which sizes the graph; "
                                              "later, the calibration's")
    graph_fixed_cost_fraction: float | None = Field(None, description="the calibration's replay fixed cost (else "
                                                    "graph_fixed_cost_us) / the sample's duration")
    second_timer_us: float | None = Field(None, description="per-call time by the independent second timer")
    second_timer_method: str | None = None
    second_timer_error: str | None = Field(None, description="why the second timer gave no figure")
    second_timer_reference_us: float | None = Field(
        None, description="the primary figure the second timer is held against: the median of the samples of the "
                          "graph it timed (graph mode); None: the block's median")
    graphs: list[GraphPlacement] = Field(default_factory=list, description="graph mode: each timed graph, its "
                                         "placement condition and its samples; the trial's figure is the mean of "
                                         "the graphs' medians")
    parent_elapsed_us: float | None = Field(
        None, description="InferCrane's own monotonic clock around the worker's sample job (send to reply), out of "
                          "the candidate's reach")
    timed_check: TimedCheck | None = Field(None, description="the outputs of the timed calls against the oracle")

    @model_validator(mode="after")
    def _host_beside_samples(self) -> "TimingBlock":
        host = self.host_samples_us
        if host is None:
            return self
        if self.mode != "launch":
            raise ValueError(f"host_samples_us in {self.mode} mode: the host's time is read around launch-mode bursts "
                             "only")
        if len(host) != len(self.samples_us):
            raise ValueError(f"{len(host)} host_samples_us for {len(self.samples_us)} samples_us: one per sample")
        bad = next((i for i, t in enumerate(host) if not (math.isfinite(t) and t >= 0)), None)
        if bad is not None:
            raise ValueError(f"host_samples_us[{bad}] is {host[bad]!r}: a host time is finite and not negative")
        return self

    def kept(self) -> list[float]:
        rejected = set(self.rejected)
        return [t for i, t in enumerate(self.samples_us) if i not in rejected]

    def kept_host(self) -> list[float]:
        """The host times of the kept samples (launch mode; empty when the block has none)."""
        rejected = set(self.rejected)
        return [t for i, t in enumerate(self.host_samples_us or []) if i not in rejected]

    def figure_us(self) -> float | None:
        """What this trial contributes: the median of its kept samples; in graph mode with several graphs, the mean
        over graphs of each graph's median of its kept samples (so every placement weighs the same)."""
        if not self.graphs:
            kept = self.kept()
            return statistics.median(kept) if kept else None
        meds = self.graph_medians()
        return statistics.fmean(meds) if meds else None

    def graph_medians(self) -> list[float]:
        rejected = set(self.rejected)
        out = []
        for g in self.graphs:
            mine = [self.samples_us[i] for i in range(g.first_sample, g.first_sample + g.samples) if i not in rejected]
            if mine:
                out.append(statistics.median(mine))
        return out


class Calibration(Strict):
    device: DeviceInfo
    floor_kernel: str
    floors: list[TimingBlock] = Field(description="empty-kernel floor, one block per mode")
    dispatcher_floor_kernel: str | None = None
    dispatcher_floors: list[TimingBlock] = Field(
        default_factory=list, description="floor of one tiny kernel via torch's dispatcher, one block per mode")
    copy_bandwidth: CopyBandwidth
    graph_fixed_cost_us: float | None = Field(
        None, description="the fixed cost of one CUDA graph replay: intercept of replay time over graphs of "
                          "GRAPH_FIXED_PROBE_CALLS empty-kernel nodes, median of many replays; every graph is sized "
                          "so that it stays under 1 % of a sample")
    clock_source: str
    clock_before_mhz: int | None
    clock_after_mhz: int | None
    cold_second_offset_us: float | None = Field(
        None, description="receipts whose cold second timer was CUPTI's span: what a CUDA event pair adds to a "
                          "cold call beyond that span (the empty kernel's cold floor by events minus its CUPTI span, "
                          "both in the clean calibration worker), added to every cold cell's CUPTI figure; None since "
                          "the second timer is the driver-API event pair, which reads the same quantity")
    parent_overhead_us: dict[str, float] = Field(
        default_factory=dict, description="per mode: what InferCrane's clock sees around a sample job of the empty "
                                          "kernel beyond the samples' own time (handshake, host work between "
                                          "samples), the median of PARENT_OVERHEAD_REPEATS jobs")


class TensorCheck(Strict):
    """One output tensor of one check compared with the oracle."""

    name: str
    passed: bool
    numel: int
    atol: float
    rtol: float
    mismatched: int = Field(ge=0, description="elements outside the tolerance, NaN/inf included")
    nonfinite: int = Field(ge=0, description="NaN or inf elements")
    max_abs_err: float | None = Field(description="over finite elements; None when none is finite")
    max_rel_err: float | None = Field(description="|got-ref|/|ref| over finite elements with |ref| > atol")
    first_bad_index: tuple[int, int] | None = Field(description="(row, col) of the first bad element, row-major")


class CheckResult(Strict):
    check_index: int
    phase: Phase = "eager"
    seed: int
    input_scale: float
    passed: bool
    contract_error: str | None = None
    tensors: list[TensorCheck] = Field(default_factory=list)


class CorrectnessResult(Strict):
    """All checks of one implementation at one row count."""

    rows: int
    hidden_size: int
    dtype: str
    device: str
    stream: str = Field(description="where the call ran and how results were read")
    checked_by: str = CHECKED_BY
    passed: bool
    tolerance: Tolerance
    checks: list[CheckResult]

    def failure_summary(self) -> str:
        """One line naming the first failing check, for error messages."""
        for c in self.checks:
            if c.passed:
                continue
            where = f"rows={self.rows} check {c.check_index} {c.phase} (seed {c.seed})"
            if c.contract_error:
                return f"{where}: {c.contract_error}"
            for t in c.tensors:
                if not t.passed:
                    return (
                        f"{where}: {t.name}: {t.mismatched}/{t.numel} elements out of tolerance ({t.nonfinite} "
                        f"NaN/inf), max abs err {t.max_abs_err}, max rel err {t.max_rel_err}, first bad (row, col) "
                        f"{t.first_bad_index}"
                    )
        return ""


# The rules that widen an interval by the timers' disagreement instead of voiding the verdict (``harness/compare.py``):
# 'widen' (results before 'widen_ratio') by 1 + |d| a cell, 'widen_ratio' by the ratio of the two timers either way.
WIDENING_RULES: tuple[str, ...] = tuple(r for r in get_args(FlagRule) if r != "void")
# The flag kind the widening rules can absorb: the two timers disagree (``TimingCell.timer_disagreement``).
TIMER_DISAGREEMENT = "timer_disagreement"


class WidenedInterval(Strict):
    """A comparison's interval widened by the timers' disagreement (the widening flag rules, ``harness/compare.py``)."""

    factor: float = Field(ge=1, description="k = r_candidate * r_reference, d a cell's signed timer_disagreement "
                          "when the cell is flagged for it, 0 otherwise; rule 'widen_ratio': r = max(1 + d, "
                          "1 / (1 + d)), the ratio of the two timers whichever is larger; rule 'widen' (earlier "
                          "results): r = 1 + |d|")
    ci_lo: float = Field(gt=0, description="the speedup's ci_lo / k")
    ci_hi: float = Field(gt=0, description="the speedup's ci_hi * k")
    holds: bool = Field(description="the speedup's verdict still holds on the widened interval (FASTER: ci_lo > "
                        "1 + m; SLOWER: ci_hi < 1 - m; SAME: inside [1 - m, 1 + m]; AMBIGUOUS always)")

    @staticmethod
    def verdict_holds(verdict: Verdict, lo: float, hi: float, margin: float) -> bool:
        if verdict is Verdict.FASTER:
            return lo > 1.0 + margin
        if verdict is Verdict.SLOWER:
            return hi < 1.0 - margin
        if verdict is Verdict.SAME:
            return 1.0 - margin <= lo and hi <= 1.0 + margin
        return verdict is Verdict.AMBIGUOUS  # widening an interval that straddles a band edge cannot end the straddle

    @classmethod
    def of(cls, speedup: TrialSpeedup, factor: float) -> "WidenedInterval":
        if speedup.ci_lo is None or speedup.ci_hi is None:
            raise ValueError("a speedup without an interval (INSUFFICIENT) cannot be widened")
        lo, hi = speedup.ci_lo / factor, speedup.ci_hi * factor
        return cls(factor=factor, ci_lo=lo, ci_hi=hi,
                   holds=cls.verdict_holds(speedup.verdict, lo, hi, speedup.same_margin))


class Comparison(Strict):
    """Candidate against one reference implementation at one row count, in one timing mode."""

    candidate: str
    reference: str
    reference_kind: Literal["baseline", "candidate"]
    rows: int
    mode: TimingMode
    speedup: TrialSpeedup = Field(description="trial-level speedup of the candidate over the reference")
    flags: list[str] = Field(default_factory=list, description="flags of either cell, naming the implementation")
    verdict: Verdict = Field(description="own verdict: the speedup's, after the flag rule")
    flag_rule: FlagRule | None = Field(None, description="how flags act on the verdict (harness/compare.py): 'void': "
                                       "any flag makes it FLAGGED; 'widen_ratio' (and 'widen' before it): flags that "
                                       "are only timer disagreements widen the interval and the verdict stands if it "
                                       "still holds there, any other "
                                       "flag makes it FLAGGED, INSUFFICIENT stays INSUFFICIENT; None: a result from "
                                       "before the rule was recorded, which is 'void'")
    widened: WidenedInterval | None = Field(None, description="a widening rule, flags only timer disagreements, an "
                                            "interval to widen: the widened interval and whether the verdict holds")
    family: FamilyMark | None = Field(default=None, description="None outside the candidate's decision family")

    def flag_kinds(self) -> list[str]:
        """The kind of each flag (``timer_disagreement``, ``below_floor``, …), without the implementation's name."""
        out = []
        for f in self.flags:
            for key in (self.candidate, self.reference):
                if f.startswith(f"{key}: "):
                    f = f[len(key) + 2:]
                    break
            out.append(f.split(":", 1)[0].strip())
        return out

    @model_validator(mode="after")
    def _verdict_follows_flags(self) -> "Comparison":
        rule = self.flag_rule or "void"
        own = self.speedup.verdict
        widenable = (rule in WIDENING_RULES and bool(self.flags) and own is not Verdict.INSUFFICIENT
                     and all(k == TIMER_DISAGREEMENT for k in self.flag_kinds()))
        if self.widened is not None and not widenable:
            raise ValueError(f"a widened interval under flag rule {rule!r} with flags {self.flags or 'empty'} and "
                             f"speedup verdict {own.value}: only {' and '.join(WIDENING_RULES)} widen, and only timer "
                             "disagreements")
        if not self.flags:
            expected = own
        elif rule == "void":
            expected = Verdict.FLAGGED
        elif own is Verdict.INSUFFICIENT:
            expected = own
        elif widenable and self.widened is not None:
            want = WidenedInterval.of(self.speedup, self.widened.factor)
            if not (math.isclose(want.ci_lo, self.widened.ci_lo, rel_tol=1e-9)
                    and math.isclose(want.ci_hi, self.widened.ci_hi, rel_tol=1e-9) and want.holds == self.widened.holds):
                raise ValueError(f"widened interval {self.widened} does not follow from the speedup's "
                                 f"[{self.speedup.ci_lo}, {self.speedup.ci_hi}] and factor {self.widened.factor}: "
                                 f"expected {want}")
            expected = own if want.holds else Verdict.FLAGGED
        else:
            expected = Verdict.FLAGGED
        if self.verdict is not expected:
            raise ValueError(f"verdict {self.verdict.value} but the speedup says {own.value}, flags are "
                             f"{self.flags or 'empty'} and the flag rule is {rule!r}: expected {expected.value}")
        return self

    @property
    def same_margin(self) -> float:
        return self.speedup.same_margin

    @property
    def candidate_t_us(self) -> float | None:
        """Geometric mean over the paired trials of the candidate's per-trial medians."""
        return self.speedup.candidate_t_us

    @property
    def reference_t_us(self) -> float | None:
        return self.speedup.baseline_t_us


class SpecRecord(Strict):
    """What the op is and the problem screened (``OpSpec.record``)."""

    op: str
    operator: str
    semantics: str
    hidden_size: int
    eps: float
    dtype: str
    num_layers: int | None = None
    model_id: str | None = None
    model_revision: str | None = None
    config_fields: dict[str, Any] = Field(default_factory=dict)
    byte_model: str
    contracts: dict[str, str]
    calls_per_decode_step: int | None = None
    calls_per_decode_step_note: str


class TimingCell(Strict):
    """All samples of one implementation at one (rows, mode), pooled over trials."""

    rows: int
    mode: TimingMode
    calls_per_sample: int
    blocks: list[TimingBlock] = Field(description="raw samples and clocks of each trial")
    kept_samples_us: list[float] = Field(description="all samples except those rejected as throttled")
    summary_over: Literal["kept", "all"] = Field(description="'all' only when every sample was rejected")
    summary: Summary = Field(description="per-call time in microseconds")
    n_rejected: int
    throttled: bool
    outputs_finite: bool | None
    bytes_moved: int | None = Field(description="byte model of the op: the fewest bytes one call must move")
    achieved_gbps: float | None = Field(description="bytes_moved / median time")
    pct_of_copy_bandwidth: float | None
    bandwidth_note: str
    second_timer_us: float | None = Field(description="per-call time by the independent second timer")
    second_timer_method: str | None
    timer_disagreement: float | None = Field(description="median of the trial the second timer ran in / "
                                             "second_timer_us - 1")
    second_timer_offset_us: float | None = Field(None, description="cold mode: the calibration's "
                                                 "cold_second_offset_us, added to second_timer_us before the two "
                                                 "timers are compared")
    floor_us: float | None = Field(description="the physical floor of this cell: max(empty-kernel floor of the mode, "
                                   "byte floor at copy bandwidth)")
    flags: list[str] = Field(default_factory=list, description="reasons this cell cannot carry a verdict (e.g. the "
                             "second timer disagrees, a time below the physical floor); empty when sound")
    levels: Levels | None = Field(None, description="graph mode with placements: the per-graph figures split into "
                                  "levels where they separate")
    host_summary: Summary | None = Field(
        None, description="launch mode: the host's time per call in microseconds (the blocks' host_samples_us), over "
                          "the same samples as summary; None where no block carries host times")
    host_bound: bool | None = Field(
        None, description="launch mode: host_summary.median >= HOST_BOUND_FRACTION (0.9) x summary.median: the launch "
                          "time is the host's pace of issuing calls, not the GPU's (launch-bound by the host); None "
                          "without host times")

    def kept_by_trial(self) -> list[list[float]]:
        """Per trial (the independent replicate), in trial order, what the comparison reads: the kept samples, or
        in graph mode with several graphs the one figure of the trial (``TimingBlock.figure_us``); a trial whose
        every sample was rejected is left out."""
        out = []
        for b in sorted(self.blocks, key=lambda b: b.trial):
            if b.graphs:
                fig = b.figure_us()
                if fig is not None:
                    out.append([fig])
                continue
            kept = b.kept()
            if kept:
                out.append(kept)
        return out

    def trial_medians(self) -> list[float]:
        """Each trial's figure (the statistic a trial contributes), in trial order."""
        return [statistics.median(t) for t in self.kept_by_trial()]

    def trial_ids(self) -> list[int]:
        """Trial index of each list ``kept_by_trial`` returns, so two cells can be paired trial by trial."""
        return [b.trial for b in sorted(self.blocks, key=lambda b: b.trial)
                if (b.figure_us() is not None if b.graphs else len(set(b.rejected)) < len(b.samples_us))]


class ImplementationResult(Strict):
    key: str
    label: str
    kind: Literal["baseline", "candidate"]
    in_place: bool | None
    source: str
    notes: list[str] = Field(default_factory=list)
    provenance: dict[str, str] = Field(default_factory=dict)
    available: bool
    skip_reason: str | None = None
    status: Status
    failure: Failure | None = None
    error: str | None = None
    exit_signal: str | None = None
    correctness: list[CorrectnessResult] = Field(default_factory=list)
    timings: list[TimingCell] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> "ImplementationResult":
        if self.status == "skipped" and (self.available or not self.skip_reason):
            raise ValueError(f"{self.key}: a skipped implementation needs available=False and a skip_reason")
        if self.status != "skipped" and not self.available:
            raise ValueError(f"{self.key}: status {self.status} but available=False")
        if self.status == "failed" and (self.failure is None or not self.error):
            raise ValueError(f"{self.key}: a failed implementation needs its failure kind and error text")
        if self.status == "ok":
            if self.failure or self.error:
                raise ValueError(f"{self.key}: status ok with a failure recorded")
            if not self.correctness or not all(c.passed for c in self.correctness):
                raise ValueError(f"{self.key}: status ok needs passing correctness at every row count")
        timed_wrong = any(b.timed_check is not None and not b.timed_check.passed for c in self.timings
                          for b in c.blocks)
        if self.failure == "incorrect" and all(c.passed for c in self.correctness) and not timed_wrong:
            raise ValueError(f"{self.key}: failure 'incorrect' without a failing correctness result or timed check")
        return self


class ScreenResult(Strict):
    schema_version: Literal["infercrane.kernel-screen-result/v2"]
    spec: SpecRecord
    run_kind: Literal["functional", "timed"]
    run_kind_reason: str
    device: DeviceInfo
    software: dict[str, str]
    isolation: Literal["subprocess", "in_process"]
    rows: list[int]
    modes_requested: list[str]
    modes: list[TimingMode] = Field(description="modes actually timed; empty when functional")
    methods: dict[str, str] = Field(description="timing mode -> the method sentence of its timing function")
    correctness_method: str
    tolerance: Tolerance
    checks_per_rows: int
    base_seed: int
    timing_input_seed: int
    trials: int
    samples_per_trial: int
    interleaving: str
    timeout_s: float
    calibration: Calibration | None
    calibration_note: str | None = None
    implementations: list[ImplementationResult]
    comparisons: list[Comparison] = Field(default_factory=list)
    comparison_notes: list[str] = Field(default_factory=list, description="pairs left uncompared, and why")
    comparison_policy: dict[str, Any] = Field(default_factory=dict)
    placement: dict[str, Any] | None = Field(None, description="graph mode: how each timed graph's placement "
                                             "condition was drawn (seed, graphs per trial, method)")
    host_method: str | None = Field(None, description="launch mode: what the timing blocks' host_samples_us are "
                                    "(harness.timing.HOST_METHOD); None when nothing was timed in launch mode, and in "
                                    "results from before the host's time was measured")
    interrupted: str | None = Field(None, description="the screen was stopped (Ctrl-C, SIGTERM) before it finished: "
                                    "what finished is kept, this says when and what did not run")
    started_at: AwareDatetime
    finished_at: AwareDatetime
    wall_s: float

    @model_validator(mode="after")
    def _consistent(self) -> "ScreenResult":
        timed_any = any(i.timings for i in self.implementations)
        if self.run_kind == "functional":
            if self.modes or timed_any or self.calibration is not None or self.comparisons:
                raise ValueError("a functional run carries no timing modes, timings, calibration or comparisons")
        elif self.calibration is None:
            raise ValueError("a timed run needs its calibration")
        hosted = any(b.host_samples_us is not None for i in self.implementations for c in i.timings for b in c.blocks)
        if hosted and not self.host_method:
            raise ValueError("timing blocks carry host_samples_us but the result names no host_method: what they "
                             "measured is not recorded")
        keys = [i.key for i in self.implementations]
        if len(set(keys)) != len(keys):
            raise ValueError(f"implementation keys repeat: {keys}")
        return self

    def implementation(self, key: str) -> ImplementationResult:
        for impl in self.implementations:
            if impl.key == key:
                return impl
        raise KeyError(f"no implementation {key!r}; present: {[i.key for i in self.implementations]}")
