"""``infercrane receipt …``: validate, show, diff, schema; keygen, sign, verify."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from ..errors import InfercraneError, InputError, ReceiptInvalid
from ..options import check_output_folder, plain


def validate(files: list[Path], /, *, quiet: bool = False, pub: Path | None = None,
             allow_legacy: bool = False) -> int:
    """Validate receipt files: schema, derived numbers, content hash, and every conclusion derived again; and the
    signature envelope beside each (FILE.dsse.json), which must sign exactly the file's bytes. Without --pub a
    signature is reported present and not verified; with --pub each receipt must carry a signature that verifies
    against that key. Exit 0 when every file is valid, 2 otherwise; a receipt of a legacy format (v1, v2 kernel
    screen), whose conclusions cannot be derived again, counts as not accepted unless --allow-legacy is given.

    Parameters
    ----------
    files
        Receipt JSON files.
    quiet
        Print failures only.
    pub
        A signer's public key: verify each receipt's signature against it (an unsigned receipt is then invalid).
    allow_legacy
        Accept a receipt of a legacy format on what can be checked of it: its arithmetic and content hash, not its
        conclusions.
    """
    from ..errors import about
    from ..receipts.signing import load_public, signature_state
    from ..receipts.crosscheck import unchecked
    from ..receipts.validate import load_receipt, policy_state

    if pub is not None:
        with about("--pub"):  # the key first: a bad one is one error, not one per receipt
            load_public(pub)
    failed = legacy = 0
    for f in files:
        try:
            r = load_receipt(f)
            signature = signature_state(f, pub)
        except ReceiptInvalid as e:
            failed += 1
            for file, path, reason in e.problems:
                print(f"INVALID {file}: {path}: {reason}")
        except InfercraneError as e:
            failed += 1
            print(f"INVALID {e.message}")
        else:
            note = r.legacy_note
            if note is not None and not allow_legacy:
                legacy += 1
                print(f"LEGACY  {f}: {note}; not accepted without --allow-legacy")
            elif note is not None:
                if not quiet:
                    print(f"legacy  {f}: {note}; accepted with --allow-legacy on that alone; {signature}")
            elif not quiet:
                policy = policy_state(r.document)[0]
                print(f"ok      {f}: {r.schema_version}; {policy + '; ' if policy else ''}{signature}"
                      f"{_incomplete_line(r.document)}")
                for line in unchecked(r.document):  # what this receipt lacks for a check
                    print(f"        not checked: {line}")
    if failed:
        print(f"{failed} of {len(files)} receipt(s) invalid")
    if legacy:
        print(f"{legacy} of {len(files)} receipt(s) of a legacy format, whose conclusions were not derived again: not "
              "accepted without --allow-legacy")
    return 2 if failed or legacy else 0


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
    if r.legacy_note is not None:  # first, before anything the receipt concludes
        con.print(Text(safe(f"{file}  — {r.legacy_note}"), style="bold red"), soft_wrap=True)
    else:
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
    from rich.text import Text

    from ..receipts.registry import family
    from ..report.console import fitted_console, render_diff, safe
    from ..receipts.validate import load_receipt

    ra, rb = load_receipt(a), load_receipt(b)
    if family(ra.schema_version) != family(rb.schema_version):
        raise InputError(f"cannot diff {ra.schema_version} ({a}) with {rb.schema_version} ({b}): different kinds of receipt",
                         hint="diff two screening receipts or two optimization-poc receipts")
    con = fitted_console(wide=wide)
    for path, r in ((a, ra), (b, rb)):
        if r.legacy_note is not None:
            con.print(Text(safe(f"{path}  — {r.legacy_note}"), style="bold red"), soft_wrap=True)
    con.print(render_diff(ra.document, rb.document, str(a), str(b), show_all=all, wide=wide))
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
    print(f"ok      {plain(file)}: signed by {v.keyid}, verified against {plain(pub)} ({plain(v.envelope)})")
    return 0


def merge(files: list[Path], /, *, out: Path, sign_key: Path | None = None) -> int:
    """Join PoC receipts (infercrane poc) or kernel receipts made on different machines or GPU types into one PoC
    receipt with custom_kernel.<gpu> per GPU type (h100, l40s, h200, …, from each receipt's measured hardware). Refuses
    receipts of different models, model revisions or policies, and two receipts of one GPU type for the same section.
    The merged receipt records its inputs (path and content hash) and validates like any PoC receipt: each section
    derived again from the embedded evidence. Its evidence class is the weakest of its parts' (a kernel screen timed
    on a GPU beside one checked on a CPU makes a functional-check receipt), and each part keeps its own
    (evidence_parts). Refused in one line: a receipt given twice, a legacy format (v1, v2 kernel screen).

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
    parts = "; ".join(f"{p['section']} {p['gpu']}: {p['evidence_class']}" for p in doc["evidence_parts"])
    print(f"merged {len(files)} receipts -> {plain(out)}: custom_kernel for {', '.join(gpus) or 'no GPU'}; "
          f"complete: {doc['complete']}" + (f" ({doc['incomplete_reason']})" if not doc["complete"] else "")
          + f"; evidence {doc['evidence_class']}, the weakest of its parts ({plain(parts)})")
    return 0
