"""Decision policies: the thresholds a decision applies, as data.

Defaults live in ``infercrane/decide/policies/{kernel,serving}.yaml``. A user file names the same
``schema_version`` and replaces any of the top-level keys; the merged mapping is validated by the models below
(``extra="forbid"``), so an unknown key or a bad value fails before any measurement, naming the field.

Keys added to the serving policy after receipts were decided under it (``SERVING_LATER_FIELDS``) carry a model default
too: the value that means what those receipts did, so a policy mapping embedded in an older receipt still loads, and
its hash (``policy_sha256``) leaves such a key out while it holds that value, so the older receipt keeps the hash it
recorded.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal, get_args, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from infercrane.datafiles import POLICY, read_mapping, read_text, validate

from infercrane.decide.metrics import SERVING_METRICS
from infercrane.decide.slo import Slo, check_slos
from infercrane.errors import InputError
from infercrane.stats.compare import min_achievable_p

KERNEL_POLICY_SCHEMA = "infercrane.kernel-policy/v1"
SERVING_POLICY_SCHEMA = "infercrane.serving-policy/v1"

PolicyKind = Literal["kernel", "serving"]

# Serving-policy keys added after receipts were decided under the policy, with the value a mapping without the key
# loads with (what those receipts did: per_statistic_seed off is the one bootstrap seed for every statistic).
SERVING_LATER_FIELDS: dict[str, object] = {
    "min_pairs": 10,
    "family_control": "holm",
    "prior_window_cv": 0.02,
    "per_statistic_seed": False,
    "quality": None,  # no semantic-quality gate: what receipts decided before the gate did
    "slos": [],  # no SLO: no goodput measured (receipts decided before SLOs)
    "goodput_continuity": None,  # no correction: a window of zero goodput entered no pair (receipts decided before it)
}


# The kernel lab's timing modes (``kernels/harness/timing.py`` times each; ``docs/kernel-lab.md`` says how), named
# once: the policy decides on one, the receipts record them, the screens take them.
TimingMode = Literal["launch", "graph", "cold"]
TIMING_MODES: tuple[str, ...] = get_args(TimingMode)


class KernelPolicy(BaseModel):
    """How the kernel lab turns correctness and timings into accept / retain / reject."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.kernel-policy/v1"]
    timing_mode: TimingMode = Field(description="timing mode the decision reads")
    same_margin: float = Field(ge=0, lt=0.5, description="half-width of the SAME band around a speedup of 1")
    confidence: float = Field(gt=0.5, lt=1, description="confidence level of each trial-level speedup interval")
    counted_baselines: list[str] = Field(min_length=1, description="baselines the candidate must beat")
    decision_max_rows: int = Field(ge=1, description="largest row count the decision reads (decode batches)")
    decide_on_bandwidth_rows: bool = Field(
        description="also decide on rows above decision_max_rows (prefill-sized, bandwidth-bound); otherwise they "
                    "are measured and reported only")
    min_expected_e2e_gain_percent: float = Field(
        ge=0, description="expected end-to-end decode gain (percent) needed to integrate"
    )

    @field_validator("counted_baselines")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v) or any(not name for name in v):
            raise ValueError(f"must be distinct non-empty names, got {v}")
        return v

    @property
    def alpha(self) -> float:
        """Family-wise level of the decision: ``1 - confidence``; each one-sided claim is read at ``alpha / 2``."""
        return 1.0 - self.confidence

    def decides_on(self, rows: int) -> bool:
        """Whether the decision reads this row count (see ``decision_max_rows``, ``decide_on_bandwidth_rows``)."""
        return rows <= self.decision_max_rows or self.decide_on_bandwidth_rows


class QualityPolicy(BaseModel):
    """The semantic-quality gate (``decide/quality.py``): which generated items both arms answer, and the bounds the
    candidate's answers must keep against the incumbent's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    items_per_task: int = Field(ge=1, le=500, description="generated items per task (serving/quality.py TASKS)")
    seed: int = Field(ge=0, description="seed of the item generator, recorded in the receipt")
    max_tokens: int = Field(ge=1, le=256, description="greedy tokens asked per item (the answer line: stops at a "
                                                     "newline)")
    accuracy_margin: float = Field(gt=0, lt=1, description="the candidate's task accuracy may be at most this much "
                                                           "below the incumbent's (non-inferiority margin, absolute)")
    confidence: float = Field(gt=0.5, lt=1, description="one-sided level of the non-inferiority test: the lower end "
                                                        "of the two-sided 2*confidence-1 interval is read")
    top_logprobs: int = Field(ge=1, le=20, description="best tokens' log-probabilities asked per place (vLLM's "
                                                      "'logprobs': N, at most its default max_logprobs 20): a "
                                                      "divergence's tokens are looked up there")
    max_divergence_gap: float = Field(gt=0, description="where the outputs part, each arm's token must be within this "
                                                        "many nats of the other arm's choice in the other's "
                                                        "distribution (a near tie)")
    max_logprob_difference: float = Field(gt=0, description="largest allowed |log p(candidate) - log p(incumbent)| "
                                                            "of a token both arms chose at the same place (nats)")


class ServingPolicy(BaseModel):
    """How the serving lab turns repeated runs of recipes A and B into accept / reject / inconclusive."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.serving-policy/v1"]
    primary_metric: str = Field(description="metric the change must improve")
    guard_metrics: list[str] = Field(description="metrics that must not get WORSE")
    equivalence_margin: float = Field(gt=0, lt=0.5, description="half-width of the EQUIVALENT band around B/A = 1")
    confidence: float = Field(gt=0.5, lt=1, description="CI level; BETTER/WORSE also need rank-test p < 1 - this")
    bootstrap_resamples: int = Field(ge=100, description="bootstrap resamples per B/A CI")
    bootstrap_seed: int = Field(ge=0, description="seed of the bootstrap generator")
    min_runs_per_arm: int = Field(ge=2, description="fewer runs per arm than this give 'inconclusive'")
    driver_agreement_percent: float = Field(
        gt=0, description="two drivers on one engine agree when their medians differ by at most this")
    per_statistic_seed: bool = Field(
        default=SERVING_LATER_FIELDS["per_statistic_seed"],
        description="seed each bootstrap interval from bootstrap_seed and the statistic's (metric, concurrency) by "
                    "SHA-256; off: every interval uses bootstrap_seed itself (receipts decided before the key)")
    min_pairs: int = Field(default=SERVING_LATER_FIELDS["min_pairs"], ge=2,
                           description="paired window design: fewer window pairs of a family metric (pooled over "
                                       "concurrencies) than this give 'inconclusive'")
    family_control: Literal["holm"] = Field(
        default=SERVING_LATER_FIELDS["family_control"],
        description="paired window design: how the family's p-values (primary + guards) are adjusted")
    prior_window_cv: float = Field(default=SERVING_LATER_FIELDS["prior_window_cv"], gt=0, lt=1,
                                   description="per-window coefficient of variation a plan assumes before measuring")
    quality: QualityPolicy | None = Field(default=SERVING_LATER_FIELDS["quality"],
                                          description="the semantic-quality gate where both arms serve real weights "
                                                      "(None: no gate)")
    slos: list[Slo] = Field(default_factory=list,
                            description="service-level objectives (decide/slo.py): every run records its goodput and "
                                        "each SLO's attainment; goodput_req_s may then be a decision metric")
    goodput_continuity: float | None = Field(
        default=SERVING_LATER_FIELDS["goodput_continuity"], gt=0, le=1,
        description="requests added to each run's or window's count of requests within every SLO, in both arms, "
                    "before goodput's B/A (Haldane-Anscombe): a window in which an arm kept none enters the "
                    "statistics; None: such a window enters no pair and no run ratio (receipts decided before the key)")

    def continuity_for(self, metric: str) -> float | None:
        """Requests added to each run's or window's count before the decision reads ``metric``: ``goodput_continuity``
        for goodput (``(good + k) / window``), None for every other metric and where the policy has no correction."""
        return self.goodput_continuity if metric == "goodput_req_s" else None

    @field_validator("slos")
    @classmethod
    def _one_bound_per_metric(cls, v: list[Slo]) -> list[Slo]:
        return check_slos(v)

    @field_validator("primary_metric")
    @classmethod
    def _known_primary(cls, v: str) -> str:
        if v not in SERVING_METRICS:
            raise ValueError(f"unknown metric {v!r}; known: {', '.join(SERVING_METRICS)}")
        return v

    @field_validator("guard_metrics")
    @classmethod
    def _known_guards(cls, v: list[str]) -> list[str]:
        unknown = [m for m in v if m not in SERVING_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {', '.join(SERVING_METRICS)}")
        if len(set(v)) != len(v):
            raise ValueError(f"names a metric twice: {v}")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> "ServingPolicy":
        if self.primary_metric in self.guard_metrics:
            raise ValueError(f"primary_metric {self.primary_metric!r} is also listed in guard_metrics")
        if not self.slos and "goodput_req_s" in (self.primary_metric, *self.guard_metrics):
            raise ValueError("goodput_req_s counts the requests within every SLO, and the policy names none; add slos")
        alpha = 1.0 - self.confidence
        p_min = min_achievable_p(self.min_runs_per_arm, self.min_runs_per_arm)
        if p_min >= alpha:
            raise ValueError(
                f"min_runs_per_arm={self.min_runs_per_arm} can never give a rank-test p below {alpha:.3g} "
                f"(smallest possible p is {p_min:.3g}); raise min_runs_per_arm"
            )
        return self

    @property
    def alpha(self) -> float:
        """Two-sided rank-test level that BETTER/WORSE must reach: ``1 - confidence``; in the paired window design
        the family-wise level of the decision."""
        return 1.0 - self.confidence

    @property
    def family_size(self) -> int:
        """Tests in the paired decision's family: the primary metric and each guard metric."""
        return 1 + len(self.guard_metrics)


_MODELS: dict[str, tuple[type[BaseModel], str]] = {
    "kernel": (KernelPolicy, KERNEL_POLICY_SCHEMA),
    "serving": (ServingPolicy, SERVING_POLICY_SCHEMA),
}


@overload
def load_policy(kind: Literal["kernel"], path: str | Path | None = None) -> KernelPolicy: ...
@overload
def load_policy(kind: Literal["serving"], path: str | Path | None = None) -> ServingPolicy: ...
def load_policy(kind: PolicyKind, path: str | Path | None = None) -> KernelPolicy | ServingPolicy:
    """The packaged ``kind`` policy, with the top-level keys of the YAML file at ``path`` (if any; or a shipped
    policy's name, ``shipped_policies``) replacing its own.

    Raises InputError for an unknown kind, a missing or unreadable file, a wrong ``schema_version``, an unknown key
    or a bad value; the message names the file and the field.
    """
    if kind not in _MODELS:
        raise InputError(f"unknown policy kind {kind!r}", hint=f"known kinds: {', '.join(_MODELS)}")
    model, schema = _MODELS[kind]
    packaged = resources.files("infercrane.decide.policies").joinpath(f"{kind}.yaml")
    merged = read_mapping(packaged.read_text(encoding="utf-8"), what="policy", source=f"(packaged {kind}.yaml)")
    source = f"(packaged {kind}.yaml)"
    if path is not None:
        p = shipped_policy(kind, path) or Path(path)
        user = read_mapping(read_text(p, POLICY), what="policy", source=str(p))
        if user.get("schema_version") != schema:
            raise InputError(
                f"policy file {p}: schema_version is {user.get('schema_version')!r}, expected {schema!r}",
                hint=f"a {kind} policy file starts with 'schema_version: {schema}'",
            )
        merged.update(user)
        source = f"{p} (over packaged {kind}.yaml)"
    return validate(model, merged, what="policy", source=source,  # type: ignore[return-value]
                    hint=f"see infercrane/decide/policies/{kind}.yaml for every key and its meaning")


def shipped_policies(kind: PolicyKind) -> list[str]:
    """The policy files InferCrane ships beside the defaults, by name (``policies/<kind>-<name>.yaml``, e.g.
    ``serving-slo``): each overrides some of ``kind``'s keys, as a user's file would."""
    folder = resources.files("infercrane.decide.policies")
    return sorted(f.name[:-5] for f in folder.iterdir() if f.name.startswith(f"{kind}-") and f.name.endswith(".yaml"))


def shipped_policy(kind: PolicyKind, name: str | Path) -> Path | None:
    """A shipped policy file named ``name`` (``shipped_policies``) when no file of that name is here, else None."""
    text = str(name)
    if Path(text).exists() or text not in shipped_policies(kind):
        return None
    return Path(str(resources.files("infercrane.decide.policies").joinpath(f"{text}.yaml")))


def policy_sha256(policy: KernelPolicy | ServingPolicy) -> str:
    """SHA-256 of the policy's canonical JSON, for a receipt to pin the exact thresholds it was decided with."""
    from infercrane.hashing import config_hash

    return config_hash(hashed_fields(policy))


def hashed_fields(policy: KernelPolicy | ServingPolicy) -> dict[str, object]:
    """What ``policy_sha256`` hashes: the policy's JSON fields, less any ``SERVING_LATER_FIELDS`` key that holds the
    value a mapping without it loads with (so a receipt decided before the key existed keeps its hash)."""
    fields = policy.model_dump(mode="json")
    if isinstance(policy, ServingPolicy):
        fields = {k: v for k, v in fields.items()
                  if not (k in SERVING_LATER_FIELDS and v == SERVING_LATER_FIELDS[k])}
    return fields
