"""``infercrane serve trace …``: request traces (``serving/trace.py``): what one holds, and one written from stated
distributions."""
from __future__ import annotations

from pathlib import Path


def show(trace: Path, /) -> int:
    """What a trace (Mooncake's JSONL: timestamp in ms, input_length, output_length, optional hash_ids) holds: its
    requests, span, mean arrival rate, length quantiles, shared prefix blocks and sha256. Every line is checked; a bad
    one is named (exit 2).

    Parameters
    ----------
    trace
        A trace file (JSON lines).
    """
    from ..serving.trace import read_trace, summarize

    s = summarize(read_trace(trace))
    rate = "—" if s["mean_rate_per_s"] is None else f"{s['mean_rate_per_s']:.3g}/s"
    print(f"{trace}: {s['requests']} requests over {s['span_s']:.3f} s (mean arrival rate {rate}); sha256 "
          f"{s['sha256']}")
    for name in ("input_length", "output_length"):
        q = s[name]
        print(f"  {name.replace('_', ' ')} (tokens): min {q['min']:g}, p50 {q['p50']:g}, p90 {q['p90']:g}, p99 "
              f"{q['p99']:g}, max {q['max']:g}, mean {q['mean']:.1f}")
    if s["with_hash_ids"]:
        print(f"  prefix blocks: {s['with_hash_ids']} requests carry hash_ids; share of blocks repeated "
              f"{s['shared_blocks_share']:.3f}")
    return 0


def generate(spec: Path, /, *, out: Path) -> int:
    """Write a trace from stated distributions, seeded: SPEC is a YAML file of ``requests``, ``rate_per_s``,
    ``arrival`` (poisson or constant), ``input_length`` and ``output_length`` (each ``kind: fixed`` with ``value``,
    ``uniform`` with ``low``/``high``, or ``lognormal`` with ``median``/``sigma``, optionally clipped to
    ``low``/``high``) and ``seed``. The same SPEC writes the same file.

    Parameters
    ----------
    spec
        The trace's YAML spec.
    out
        The trace file to write (JSON lines); an existing file is not overwritten.
    """
    from ..datafiles import TRACE_SPEC, read_mapping, read_text, validate
    from ..errors import InputError
    from ..options import check_output_file
    from ..receipts.io import write_atomic_bytes
    from ..serving.trace import TraceSpec, generate as make, parse_trace, summarize

    check_output_file(out, "--out")
    if out.exists():
        raise InputError(f"--out {out}: already exists; nothing is overwritten", hint="give another path")
    ts = validate(TraceSpec, read_mapping(read_text(spec, TRACE_SPEC), what="trace spec", source=str(spec)),
                  what="trace spec", source=str(spec), hint="see `infercrane serve trace generate --help`")
    text = make(ts)
    s = summarize(parse_trace(text, str(out)))
    write_atomic_bytes(out, text.encode("utf-8"))
    print(f"wrote {out}: {s['requests']} requests over {s['span_s']:.3f} s; sha256 {s['sha256']}")
    return 0
