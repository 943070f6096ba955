"""serve's own inputs: --runs out of range is one line naming the range; each command's default workload."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.cli import main


class _Captured(Exception):
    pass


@pytest.mark.parametrize("runs", ["1", "2", "101"])
@pytest.mark.parametrize("command", [["ab", "eager", "compiled"], ["bench", "eager"]])
def test_runs_out_of_range_is_one_line_with_the_range(tmp_path, capsys, command, runs):
    rc = main(["serve", *command, "--runs", runs, "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"infercrane: error: --runs {runs}: give 3 to 100 runs per arm (with 3 a rank test "
                               "cannot reach p < 0.05; 5 or more are recommended)"]


@pytest.mark.parametrize("command, workload", [(["ab", "eager", "compiled"], "seed-paired"),
                                               (["bench", "eager"], "public-1000")])
def test_each_command_runs_its_default_workload(tmp_path: Path, monkeypatch, command, workload):
    import infercrane.serving.workload as wl

    seen = {}

    def run_plan(recs, w, **kw):
        seen["workload"] = w.name
        raise _Captured

    monkeypatch.setattr(wl, "run_plan", run_plan)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Captured):
        main(["serve", *command, "--out", str(tmp_path / "r.json")])
    assert seen == {"workload": workload}


def test_shipped_test_server_recipes_differ_and_name_a_catalog_model():
    from infercrane.models.catalog import list_models
    from infercrane.serving.recipes import check_recipe, load_recipe
    from infercrane.serving.workload import load_workload

    a, b = load_recipe("testserver"), load_recipe("testserver-fast")
    assert a.engine == b.engine == "testserver" and a.model == b.model and a.model in list_models()
    assert a.engine_args != b.engine_args
    for r in (a, b):
        check_recipe(r)
    quick = load_workload("quick")
    # a design that decides on the test server's arms: at least the packaged policy's min_pairs window pairs, time
    # windows (each arm visit one AIPerf block)
    from infercrane.decide.policy import load_policy
    from infercrane.serving.ab import design_of

    assert quick.window_s is not None and quick.runs_per_arm * len(quick.concurrency) >= load_policy("serving").min_pairs
    assert design_of(quick, load_policy("serving"))[1] is None
