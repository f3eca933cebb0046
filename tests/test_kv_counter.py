"""`models.kv.Counter`: a compiled pass's positions and write position as views of one kept tensor."""
import torch

from specdec_ref.models.kv import Counter


def test_positions_and_scalars_hold_the_numbers_asked_for_across_growth():
    counter = Counter()
    for start, q in [(0, 5), (5, 1), (300, 8), (511, 1), (700, 3), (2000, 7), (3, 2)]:  # grows past 512, 1400
        pos = counter.positions(start, q)
        assert pos.shape == (1, q) and pos.dtype == torch.long
        assert pos.tolist() == [list(range(start, start + q))]
        s = counter.scalar(start + q)
        assert s.dim() == 0 and int(s) == start + q
    # views of one tensor, not copies: nothing new is allocated per pass
    a, b = counter.positions(10, 3), counter.scalar(40)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() == \
        counter.values.untyped_storage().data_ptr()


def test_a_view_handed_out_before_growth_keeps_its_numbers():
    counter = Counter()
    early = counter.positions(4, 2)
    counter.positions(5000, 4)  # grows: a new tensor; the old view still reads 4, 5
    assert early.tolist() == [[4, 5]]
