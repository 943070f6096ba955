"""An op declares its tensors' shapes (``OpSpec.tensor_shape``); the harness's pack, guards and memory count follow
them instead of assuming ``[rows, hidden]``."""
from __future__ import annotations

from dataclasses import dataclass

from infercrane.kernels.harness.correctness import pack_entries
from infercrane.kernels.harness.execute import GUARD_ROWS
from infercrane.kernels.harness.memory import COMPARE_BYTES_PER_ELEMENT, harness_needs
from infercrane.kernels.ops.rms_norm.spec import RMSNormSpec


@dataclass(frozen=True)
class PerHead(RMSNormSpec):
    """RMSNorm over rows x 4 heads x hidden_size (a q/k norm's layout, hidden_size its head_dim), one weight."""

    def tensor_shape(self, name: str, rows: int) -> tuple[int, ...]:
        if name in self.INPUTS and name not in self.ROW_TENSORS:
            return (self.hidden_size,)
        return (rows, 4, self.hidden_size)


def test_the_default_shapes_are_rows_by_hidden_and_a_weight() -> None:
    spec = RMSNormSpec(hidden_size=576, eps=1e-5)
    assert spec.tensor_shape("x", 8) == (8, 576) and spec.tensor_shape("out", 8) == (8, 576)
    assert spec.tensor_shape("weight", 8) == (576,)


def test_the_pack_follows_the_specs_shapes() -> None:
    spec = PerHead(hidden_size=128, eps=1e-6)
    out_of_place = pack_entries(spec, 8, False, ["eager"])
    assert out_of_place["in.eager.x"][0] == (8, 4, 128) and out_of_place["in.eager.weight"][0] == (128,)
    assert out_of_place["guard.eager.x"][0] == (2 * GUARD_ROWS, 4, 128)
    assert out_of_place["ret.eager.out"][0] == (8, 4, 128)
    in_place = pack_entries(spec, 8, True, ["eager"])
    assert in_place["after.eager.out"][0] == (8, 4, 128) and in_place["guard.eager.out"][0] == (2 * GUARD_ROWS, 4, 128)
    plain = pack_entries(RMSNormSpec(hidden_size=512, eps=1e-6), 8, False, ["eager"])
    assert plain["in.eager.x"][0] == (8, 512) and plain["guard.eager.x"][0] == (2 * GUARD_ROWS, 512)


def test_the_memory_count_reads_a_row_tensors_elements_from_the_spec() -> None:
    [host] = harness_needs(PerHead(hidden_size=128, eps=1e-6), [64], "cpu")
    assert host.parts["float64 comparison"] == COMPARE_BYTES_PER_ELEMENT * 64 * 4 * 128
    [plain] = harness_needs(RMSNormSpec(hidden_size=128, eps=1e-6), [64], "cpu")
    assert plain.parts["float64 comparison"] == COMPARE_BYTES_PER_ELEMENT * 64 * 128
