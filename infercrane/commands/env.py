"""``infercrane env``: this machine as a receipt records it."""
from __future__ import annotations

import json


def env(*, json_output: bool = False) -> int:
    """Print this machine's hardware and software versions, as receipts record them (works without a GPU).

    Parameters
    ----------
    json_output
        Print JSON instead of a table.
    """
    from ..env.capture import git_state, hardware, software_versions

    commit, dirty = git_state()
    info = {"hardware": hardware(), "software": software_versions(), "git_commit": commit, "git_dirty": dirty}
    if json_output:
        print(json.dumps(info, indent=2))
        return 0
    from rich.table import Table

    from ..report.console import console
    from ..options import plain

    t = Table(title="infercrane env", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    for section in ("hardware", "software"):
        for k, v in info[section].items():
            t.add_row(plain(f"{section}.{k}"), "—" if v is None else plain(v))
    t.add_row("git_commit", plain(f"{commit}{' (dirty)' if dirty else ''}") if commit else "—")
    console().print(t)
    return 0
