"""``infercrane model …``: the model catalog and the offline stand-in."""
from __future__ import annotations

from pathlib import Path


def list_models() -> int:
    """List the catalog's models with the shapes InferCrane uses."""
    from rich.table import Table

    from ..models.catalog import get, list_models as ids
    from ..report.console import console
    from ..options import plain

    t = Table(title="model catalog", title_justify="left")
    for col in ("id", "revision", "hidden", "layers", "heads/kv", "rms_norm_eps", "vocab"):
        t.add_column(col)
    for model_id in ids():
        c = get(model_id).config
        cells = (model_id, get(model_id).revision[:12], c.get("hidden_size"), c.get("num_hidden_layers"),
                 f"{c.get('num_attention_heads')}/{c.get('num_key_value_heads')}", c.get("rms_norm_eps"),
                 c.get("vocab_size"))
        t.add_row(*(plain(x) for x in cells))
    console().print(t)
    return 0


def stand_in(model: str, /, *, out: Path, overwrite: bool = False) -> int:
    """Write an offline stand-in of a catalog model: its exact public config.json, a byte-level BPE tokenizer trained
    locally and deterministically, tokenizer_config.json with a chat template, generation_config.json, and a marker.

    Serve it with ``vllm serve OUT --load-format dummy`` (random weights): shapes and speed are the real model's,
    outputs are not. Receipts made with it record ``weights: dummy`` and ``tokenizer: stand-in``.

    Parameters
    ----------
    model
        Catalog model id, e.g. Qwen/Qwen3-0.6B (see ``infercrane model list``).
    out
        Folder to write (must be empty or absent).
    overwrite
        Replace an existing stand-in folder.
    """
    from ..errors import about
    from ..models.catalog import get
    from ..models.standin import write_stand_in
    from ..options import check_output_folder

    get(model)  # an unknown model is reported as such, before the output folder
    check_output_folder(out, "--out")
    with about("--out"):
        info = write_stand_in(model, out, overwrite=overwrite)
    print(f"wrote stand-in of {info.model_id}@{info.revision} to {info.path}")
    print(f"  config vocab {info.vocab_size}; tokenizer: {info.trained_vocab_size} trained + {info.filler_tokens} filler "
          f"+ special tokens = {info.tokenizer_len} ids; tokenizer.json sha256 {info.tokenizer_sha256[:16]}…")
    print(f"  serve: vllm serve {info.path} --load-format dummy")
    return 0
