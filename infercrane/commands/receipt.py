"""``infercrane receipt …``: validate, show, diff, schema; keygen, sign, verify."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from ..errors import InfercraneError, InputError, ReceiptInvalid
from ..options import check_output_folder, plain


def validate(files: list[Path], /, *, quiet: bool = False) -> int:
    """Validate receipt files: schema, derived numbers, content hash.

    Parameters
    ----------
    files
        Receipt JSON files.
    quiet
        Print failures only.
    """
    from ..receipts.crosscheck import unchecked
    from ..receipts.validate import load_receipt, policy_state

    failed = 0
    for f in files:
        try:
            r = load_receipt(f)
        except ReceiptInvalid as e:
            failed += 1
            for file, path, reason in e.problems:
                print(f"INVALID {file}: {path}: {reason}")
        except InfercraneError as e:
            failed += 1
            print(f"INVALID {e.message}")
        else:
            if not quiet:
                policy = policy_state(r.document)[0]
                print(f"ok      {f}: {r.schema_version}; {policy + '; ' if policy else ''}{_signature_line(f)}"
                      f"{_incomplete_line(r.document)}")
                for line in unchecked(r.document):  # what this receipt lacks for a check
                    print(f"        not checked: {line}")
    if failed:
        print(f"{failed} of {len(files)} receipt(s) invalid")
        return 2
    return 0


def _incomplete_line(doc: dict) -> str:
    """'; incomplete: interrupted (the writer … is gone)' for a receipt marked incomplete; '' otherwise."""
    if doc.get("complete", True) is not False:
        return ""
    from ..serving.progress import serving_progress_state

    return f"; incomplete: {serving_progress_state(doc)}"


def show(file: Path, /, *, all: Annotated[bool, Parameter(name="--all")] = False, wide: bool = False) -> int:
    """Show a receipt: every section's decision, reason and boundary first, then its conditions (GPU, software,
    model, workload, timing mode), then the evidence as tables that fit the terminal.

    Parameters
    ----------
    file
        A receipt JSON file (it is validated first).
    all
        Every field and every row (raw evidence, provenance and embedded receipts included), not the summary.
    wide
        Let tables be as wide as they need (nothing folded or dropped), for a file or a pager.
    """
    from rich.text import Text

    from ..report.console import fitted_console, render_show, safe
    from ..receipts.validate import load_receipt

    r = load_receipt(file)
    con = fitted_console(wide=wide)
    con.print(Text(safe(f"{file}  ({r.schema_version}) — valid")))  # an incomplete one says so next, plainly
    con.print(render_show(r.document, show_all=all, wide=wide))
    return 0


def diff(a: Path, b: Path, /, *, all: Annotated[bool, Parameter(name="--all")] = False, wide: bool = False) -> int:
    """Compare two receipts of the same kind: both decisions side by side, a count of changed / same / only-in-A /
    only-in-B fields, then the fields that differ with B - A and B / A.

    Parameters
    ----------
    a
        Receipt A.
    b
        Receipt B.
    all
        Every field, equal ones included, values in full (long lists too).
    wide
        Let the table be as wide as it needs (nothing folded), for a file or a pager.
    """
    from ..receipts.registry import family
    from ..report.console import fitted_console, render_diff
    from ..receipts.validate import load_receipt

    ra, rb = load_receipt(a), load_receipt(b)
    if family(ra.schema_version) != family(rb.schema_version):
        raise InputError(f"cannot diff {ra.schema_version} ({a}) with {rb.schema_version} ({b}): different kinds of receipt",
                         hint="diff two screening receipts or two optimization-poc receipts")
    fitted_console(wide=wide).print(render_diff(ra.document, rb.document, str(a), str(b), show_all=all, wide=wide))
    return 0


def schema(*, version: str | None = None, write: Path | None = None) -> int:
    """Print the JSON Schema of one receipt version, or write every version's schema into a folder.

    Parameters
    ----------
    version
        A schema_version, e.g. infercrane.cuda-kernel-screening-receipt/v2. Default: list the known versions.
    write
        Write one file per version into this folder (as the repo's schemas/ folder holds them).
    """
    from ..receipts.schemas import json_schema, schema_filename
    from ..receipts.registry import MODELS, model_for

    if write is not None:
        check_output_folder(write, "--write")
        write.mkdir(parents=True, exist_ok=True)
        for v in MODELS:
            (write / schema_filename(v)).write_text(json.dumps(json_schema(v), indent=2) + "\n")
            print(f"wrote {write / schema_filename(v)}")
        return 0
    if version is None:
        print("\n".join(MODELS))
        return 0
    from ..errors import about

    with about("--version"):
        model_for(version)
    print(json.dumps(json_schema(version), indent=2))
    return 0


def _signature_line(receipt: Path) -> str:
    """What validation can say of a signature without a public key: the key ids an envelope beside the receipt claims
    over exactly its bytes (``receipt verify --pub`` checks them), or "unsigned"."""
    from ..receipts.signing import signed_by

    try:
        ids = signed_by(receipt)
    except InfercraneError as e:
        return f"signature envelope INVALID: {e.message}"
    return "unsigned" if ids is None else f"signed by {', '.join(ids)} (not verified: receipt verify --pub)"


def keygen(*, out: Path = Path("."), name: str = "infercrane") -> int:
    """Write an ed25519 key pair for signing receipts: NAME.key (private, 0600) and NAME.pub.

    Parameters
    ----------
    out
        Folder for the two files (created; existing keys are never overwritten).
    name
        File name stem of the two files.
    """
    from ..errors import about
    from ..receipts.signing import keygen as make, keyid_of, load_public

    with about("--out"):
        private, public = make(out, name)
    print(f"wrote {plain(private)} (keep private) and {plain(public)}; key id {keyid_of(load_public(public))}")
    return 0


def sign(file: Path, /, *, key: Path) -> int:
    """Sign a receipt (its exact bytes, ed25519, a DSSE envelope written beside it as FILE.dsse.json).

    Parameters
    ----------
    file
        A receipt JSON file; it is validated first, and only a valid receipt is signed.
    key
        The private key (from `infercrane receipt keygen`).
    """
    from ..errors import about
    from ..receipts.signing import sign as do_sign
    from ..receipts.validate import load_receipt

    load_receipt(file)
    with about("--key"):
        out = do_sign(file, key)
    print(f"signed  {plain(file)} -> {plain(out)}")
    return 0


def verify(file: Path, /, *, pub: Path, envelope: Path | None = None) -> int:
    """Verify a receipt's signature: the envelope must sign exactly the file's bytes with the key in --pub; the
    receipt must also validate.

    Parameters
    ----------
    file
        A receipt JSON file.
    pub
        The signer's public key.
    envelope
        The DSSE envelope (default: FILE.dsse.json beside the receipt).
    """
    from ..errors import about
    from ..receipts.signing import envelope_path, load_public, read_envelope
    from ..receipts.signing import verify as do_verify
    from ..receipts.validate import load_receipt

    with about("--pub"):  # the options first, then the evidence they apply to
        load_public(pub)
    if envelope is not None:
        with about("--envelope"):
            read_envelope(envelope)
    load_receipt(file)
    read_envelope(envelope_path(file) if envelope is None else envelope)
    v = do_verify(file, pub, envelope)
    print(f"ok      {plain(file)}: signed by {v.keyid} ({plain(v.envelope)})")
    return 0


def merge(files: list[Path], /, *, out: Path, sign_key: Path | None = None) -> int:
    """Join PoC receipts (infercrane poc) or kernel receipts made on different machines or GPU types into one PoC
    receipt with custom_kernel.<gpu> per GPU type (h100, l40s, h200, …, from each receipt's measured hardware). Refuses
    receipts of different models, model revisions or policies, and two receipts of one GPU type for the same section.
    The merged receipt records its inputs (path and content hash) and validates like any PoC receipt: each section
    derived again from the embedded evidence.

    Parameters
    ----------
    files
        Two or more PoC or kernel (v3) receipt files.
    out
        The merged PoC receipt.
    sign_key
        Sign the merged receipt as it is written (an ed25519 private key from `infercrane receipt keygen`).
    """
    from ..poc.merge import merge as do_merge
    from ..receipts.validate import write_receipt
    from ..options import check_output_file
    from ..receipts.signing import check_sign_key, sign_written

    check_output_file(out, "--out")
    check_sign_key(sign_key)
    if any(out.exists() and f.exists() and out.samefile(f) for f in files):
        raise InputError(f"--out {out}: is one of the receipts being merged; write the merged receipt elsewhere")
    written = write_receipt(do_merge(list(files)), out)
    sign_written(written.path, sign_key)
    doc = written.document
    gpus = [k for k in (doc.get("custom_kernel") or {}) if k not in ("operator", "correctness", "decision", "reason",
                                                                        "decision_code")]
    print(f"merged {len(files)} receipts -> {plain(out)}: custom_kernel for {', '.join(gpus) or 'no GPU'}; "
          f"complete: {doc['complete']}" + (f" ({doc['incomplete_reason']})" if not doc["complete"] else ""))
    return 0
