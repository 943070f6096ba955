"""A real local Ray cluster on the CPU for the executor tests: custom ``accelerator_type:*`` resources stand in for
GPU types (Ray's own placement label), so tasks are placed by type as on a GPU cluster; the jobs themselves run on
the CPU and their receipts say so."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

STAND_IN_TYPES = ("H100", "L40S", "H200")
PID_FILE_ENV = "INFERCRANE_TEST_PID_FILE"  # tests/kernels/fixtures/lifecycle_candidates.py records pids there


@dataclass(frozen=True)
class RayCluster:
    address: str
    pid_file: Path
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory) -> RayCluster:
    pytest.importorskip("ray")
    tmp = tmp_path_factory.mktemp("ray")
    pid_file = tmp / "pids"
    # token authentication off for this throwaway loopback cluster: its token file would be shared through $HOME
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {
        "RAY_AUTH_MODE": "disabled", PID_FILE_ENV: str(pid_file), "RAY_USAGE_STATS_ENABLED": "0"}
    ray = str(Path(sys.executable).with_name("ray"))
    port = _free_port()
    resources = json.dumps({f"accelerator_type:{t}": 1 for t in STAND_IN_TYPES})
    subprocess.run([ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                    "--num-gpus=0", f"--resources={resources}", "--include-dashboard=false", "--disable-usage-stats"],
                   env=env, check=True, timeout=180, capture_output=True)
    try:
        yield RayCluster(address=f"127.0.0.1:{port}", pid_file=pid_file, env=env)
    finally:
        try:
            import ray as ray_mod

            ray_mod.shutdown()
        finally:
            subprocess.run([ray, "stop", "--force"], env=env, timeout=120, capture_output=True)
