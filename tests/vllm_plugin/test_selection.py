"""The source hash a provider records covers the files its kernel runs: its op's folder and the plumbing the op
folders share, not only the folder."""
from __future__ import annotations

from pathlib import Path

from infercrane.vllm_plugin import selection


def test_the_kernel_source_hash_changes_with_the_op_folder_and_the_shared_plumbing(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    ops = tmp_path / "infercrane" / "kernels" / "ops"
    (ops / "rms_norm").mkdir(parents=True)
    (tmp_path / "infercrane" / "vllm_plugin").mkdir()
    files = {ops / "rms_norm" / "triton_kernel.py": "a", ops / "rms_norm" / "rms_norm.cu": "b",
             ops / "rowwise.cuh": "c", ops / "triton_rowwise.py": "d",
             tmp_path / "infercrane" / "vllm_plugin" / "providers.py": "e"}
    for path, text in files.items():
        path.write_text(text)
    (ops / "notes.txt").write_text("not a kernel source")
    monkeypatch.setattr(selection, "INFERCRANE_ROOT", tmp_path)
    first = selection.kernel_sources_sha256("rms_norm", "triton", None)
    (ops / "notes.txt").write_text("changed")
    assert selection.kernel_sources_sha256("rms_norm", "triton", None) == first
    for path in files:
        path.write_text(files[path] + " changed")
        again = selection.kernel_sources_sha256("rms_norm", "triton", None)
        assert again != first, path
        first = again
