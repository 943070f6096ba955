"""The test server's toy model: where a norm kernel's numerics reach the answers and log-probabilities of the
semantic-quality items (``serving/quality.py``), so that CI can see a wrong kernel degrade quality.

The test server knows every item's answer (``quality.solve``); its tokens are the answer's whitespace-separated words,
each with a leading space (``" 7 + 5"`` would be ``[" 7", " +", " 5"]``; an answer ``"12"`` is ``[" 12"]``). At
output position ``i`` the toy model chooses between ``CANDIDATES`` tokens: the answer's token and three distractors
(for a number ``n``: ``n + 1``, ``n + 10`` and ``n - 1``, or ``n + 2`` for 0; otherwise three words of
``DISTRACTOR_WORDS`` other than the token, chosen by the seed below). Greedy decoding picks the candidate of the
largest logit; the log-probability of a token is its log-softmax over the candidates. A wrong pick is kept and the
next position goes on with the answer's next token (teacher forcing: the toy model has no state).

**The computation.** Everything is seeded by ``sha256(prompt, i)`` (a ``torch.Generator``) and runs in float32 on
CPU (``HIDDEN`` = 256; about 1 ms an item):

* a norm weight ``w ~ 1 + 0.1 N(0, 1)`` and a read-out vector ``v`` scaled so that ``u = w * v`` has mean square 1;
* one row per candidate ``k``: a direction ``d_k`` of mean square 1 whose alignment with the read-out,
  ``a_k = mean(d_k * u)``, is chosen (below), and a magnitude ``m_k = sqrt(c_k * EPS)``: the row's residual stream
  is ``r_k = m_k d_k``, split at random into ``x_k + residual_k``;
* the one non-trivial op: the norm kernel, InferCrane's fused residual-add + RMSNorm contract
  ``fn(x, residual, weight, eps)`` (in place: ``residual <- x + residual``, ``x <- rmsnorm(residual) * weight``;
  or out of place, returning ``(out, residual_out)``), called once on the ``[CANDIDATES, HIDDEN]`` rows;
* ``logit_k = TEMPERATURE * mean(out_k * v)``. With the exact op this is ``TEMPERATURE * a_k * g_k`` where
  ``g_k = m_k / sqrt(m_k^2 + EPS) = sqrt(c_k / (c_k + 1))``.

**Why eps matters.** The rows are built at the scale of eps (mean square ``c_k * EPS``): the answer's row has
``c = 2..6`` (``g`` 0.82 to 0.93), each distractor's ``c = 0.05..0.5`` (``g`` 0.22 to 0.58), so eps damps the
distractors' rows. The answer's alignment is ``a = 0.45..0.6`` and a distractor's ``a * rho`` with ``rho =
0.2..1.1``: with the exact op the answer always wins, by at least ``TEMPERATURE * a * (0.816 - 1.1 * 0.577) >= 0.65``
nats. **A kernel that ignores eps** normalizes every row to mean square 1 (``g = 1``), so a distractor better aligned
than the answer (``rho > 1``: about one in nine distractors, about a third of the positions) now wins, and every
position's log-probabilities move (by up to about one nat). Greedy outputs change for the items
holding such a position, deterministically. Any other numeric error moves the logits by ``TEMPERATURE`` times
its effect on ``mean(out * v)``, and rounding errors average out over the ``HIDDEN`` elements: the eager baseline
(float32) gives the oracle's log-probabilities to the last bit or so, a kernel whose output is rounded to bfloat16
(relative error up to 2^-9) moves them by under 1e-3 (8e-4 at most over 320 items), one that uses 1.1 eps by about
2e-2, and none of these changes a pick (the smallest margin is 0.65 nats).

Token ids (``token_id``): a word of the test server's fixed list has its index there (0 to 15); any other token
string ``16 + sha256(token) mod (VOCAB_SIZE - 16)``, the same in every process (two strings may share an id, as
nothing here needs them distinct).

``--norm-kernel`` names the kernel (``load_norm_kernel``): ``reference`` (default) is InferCrane's float32 oracle
(``kernels/ops/fused_add_rmsnorm/oracle.py``); ``path.py:function`` is a user candidate file, loaded as the kernel
lab loads one (``kernels/user_candidate.py``: its declared contract, or the contract inferred from one call in each
form on CPU).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

HIDDEN = 256
CANDIDATES = 4
EPS = 1e-5  # SmolLM2's and Llama's rms_norm_eps
TEMPERATURE = 8.0
VOCAB_SIZE = 50_000
REFERENCE = "reference"
# The words a non-numeric token's distractors are drawn from.
DISTRACTOR_WORDS = ("blue", "green", "house", "river", "paper", "stone", "seven", "table", "apple", "music",
                    "north", "glass", "horse", "winter", "silver", "garden")
# Rows' scale (mean square as a multiple of EPS) and alignment, as the module docstring states them.
ANSWER_MS = (2.0, 6.0)
DISTRACTOR_MS = (0.05, 0.5)
ANSWER_ALIGNMENT = (0.45, 0.6)
DISTRACTOR_RHO = (0.2, 1.1)


def token_id(token: str, words: tuple[str, ...] = ()) -> int:
    """The token's id: its index in ``words`` (the server's fixed list, each with a leading space), else a stable
    hash of the string into ``[len(words), VOCAB_SIZE)``."""
    core = token[1:] if token.startswith(" ") else token
    if core in words:
        return words.index(core)
    digest = int.from_bytes(hashlib.sha256(token.encode("utf-8")).digest()[:8], "big")
    return len(words) + digest % (VOCAB_SIZE - len(words))


@dataclass(frozen=True)
class Step:
    """One output position: the token picked, its log-probability, and every candidate's, best first."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class NormKernel:
    """The fused residual-add + RMSNorm the toy model runs: ``spec`` as given to ``--norm-kernel``."""

    spec: str
    fn: Callable[..., Any]
    in_place: bool

    def __call__(self, x: Any, residual: Any, weight: Any, eps: float) -> Any:
        """The normalized rows (``x`` after an in-place call, the first output of an out-of-place one)."""
        if self.in_place:
            self.fn(x, residual, weight, eps)
            return x
        out = self.fn(x, residual, weight, eps)
        return out[0] if isinstance(out, (tuple, list)) else out


def load_norm_kernel(spec: str) -> NormKernel:
    """``reference`` (the float32 oracle) or ``path.py:function`` (a user candidate file); InputError when the file,
    the function or its calling contract cannot be had."""
    from infercrane.errors import about

    if spec == REFERENCE:
        from infercrane.kernels.ops.fused_add_rmsnorm.oracle import fused_add_rmsnorm_ref

        return NormKernel(spec, fused_add_rmsnorm_ref, in_place=False)
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
    from infercrane.kernels.user_candidate import infer_contract, load_candidate, parse_candidate_ref

    with about("--norm-kernel"):
        ref = parse_candidate_ref(spec)
        op = FusedAddRMSNormSpec(hidden_size=HIDDEN, eps=EPS, dtype="float32", rows=(CANDIDATES,))
        loaded = load_candidate(ref, infer=lambda fn: infer_contract(fn, op, "cpu", ref.text))
    return NormKernel(spec, loaded.fn, loaded.in_place)


def _seed(prompt: str, i: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{prompt}\x00{i}".encode("utf-8")).digest()[:8], "big") >> 1


def distractors(token: str, pick: Any) -> list[str]:
    """Three wrong tokens for ``token`` (its leading space kept); ``pick(population, k)`` chooses the words."""
    lead = " " if token.startswith(" ") else ""
    core = token.strip()
    if core.isdigit():
        n = int(core)
        return [f"{lead}{m}" for m in (n + 1, n + 10, n - 1 if n >= 1 else n + 2)]
    pool = [w for w in DISTRACTOR_WORDS if w != core.lower()]
    return [f"{lead}{w}" for w in pick(pool, CANDIDATES - 1)]


class ToyModel:
    """Greedy decoding of an answer's tokens through ``kernel`` (see the module docstring)."""

    def __init__(self, kernel: NormKernel) -> None:
        self.kernel = kernel

    def step(self, prompt: str, i: int, token: str) -> Step:
        """Position ``i`` of ``prompt``'s output, whose right token is ``token``: the candidate picked and the
        log-probabilities."""
        import torch

        gen = torch.Generator().manual_seed(_seed(prompt, i))

        def uniform(lo_hi: tuple[float, float]) -> float:
            lo, hi = lo_hi
            return lo + (hi - lo) * float(torch.rand((), generator=gen, dtype=torch.float64))

        def pick(population: list[str], k: int) -> list[str]:
            order = torch.randperm(len(population), generator=gen).tolist()
            return [population[j] for j in order[:k]]

        candidates = [token, *distractors(token, pick)]
        weight = 1.0 + 0.1 * torch.randn(HIDDEN, generator=gen, dtype=torch.float64)
        v = torch.randn(HIDDEN, generator=gen, dtype=torch.float64)
        v = v / (weight * v).pow(2).mean().sqrt()
        u = weight * v  # mean square 1
        a_answer = uniform(ANSWER_ALIGNMENT)
        rows, xs = [], []
        for k in range(CANDIDATES):
            a = a_answer if k == 0 else a_answer * uniform(DISTRACTOR_RHO)
            c = uniform(ANSWER_MS if k == 0 else DISTRACTOR_MS)
            z = torch.randn(HIDDEN, generator=gen, dtype=torch.float64)
            z = z - (z @ u) / (u @ u) * u  # orthogonal to u
            d = a * u + z * ((1.0 - a * a) / z.pow(2).mean()).sqrt()  # mean(d * u) = a, mean(d^2) = 1
            r = (c * EPS) ** 0.5 * d
            x = 0.6 * (c * EPS) ** 0.5 * torch.randn(HIDDEN, generator=gen, dtype=torch.float64)
            rows.append(r)
            xs.append(x)
        order = torch.randperm(CANDIDATES, generator=gen).tolist()  # the answer's row is not always the first
        r = torch.stack([rows[k] for k in order])
        x = torch.stack([xs[k] for k in order])
        x32 = x.to(torch.float32).contiguous()
        residual32 = (r - x).to(torch.float32).contiguous()
        out = self.kernel(x32, residual32, weight.to(torch.float32), EPS)
        logits = TEMPERATURE * (out.to(torch.float32) * v.to(torch.float32)).mean(dim=-1)
        logprobs = torch.log_softmax(logits, dim=-1).tolist()
        ranked = sorted(((candidates[k], logprobs[row]) for row, k in enumerate(order)), key=lambda t: -t[1])
        chosen_row = int(torch.argmax(logits))
        chosen = candidates[order[chosen_row]]
        return Step(token=chosen, logprob=logprobs[chosen_row], top=tuple(ranked))

    def decode(self, prompt: str, answer_tokens: list[str]) -> list[Step]:
        """Every position of the answer: the candidate picked at each (a wrong pick does not change what follows)."""
        return [self.step(prompt, i, t) for i, t in enumerate(answer_tokens)]

    def forced(self, prompt: str, tokens: list[str]) -> list[Step]:
        """Log-probabilities of given tokens (the server's words for other prompts): each position computed with the
        given token as its right one, and that token kept whatever the kernel picks."""
        steps = []
        for i, t in enumerate(tokens):
            s = self.step(prompt, i, t)
            lp = dict(s.top)[t]
            steps.append(Step(token=t, logprob=lp, top=s.top))
        return steps
