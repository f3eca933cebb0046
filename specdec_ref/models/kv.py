"""The KV buffers a compiled pass reads and writes: one tensor per layer's keys and values, [1, heads, L, d],
all of them views of one allocation, so that moving positions in every layer is one operation (except the
example inputs a package is exported on: `kv_buffers(..., separate=True)`)."""
from __future__ import annotations

import torch


def kv_shape(model, length: int) -> tuple[int, int, int, int]:
    """[1, kv heads, length, head dim]: one layer's keys (or values) for `length` positions."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return (1, c.num_key_value_heads, length, head_dim)


class KVBuffers(list):
    """[k_0, v_0, k_1, v_1, ...]: views of one tensor, `whole` [2 * layers, 1, heads, L, d]. (A view made
    under inference mode does not know its base, so the list keeps it.)"""

    def __init__(self, whole: torch.Tensor):
        super().__init__(whole.unbind(0))
        self.whole = whole


def kv_buffers(model, length: int, dtype: torch.dtype, device=None, *,
               separate: bool = False) -> list[torch.Tensor]:
    """Zeroed keys and values for every layer of `model` (a Hugging Face LM or a head's body), `length`
    positions each: [k_0, v_0, k_1, v_1, ...], views of one tensor (`KVBuffers`) so that rows move in every
    layer at once (`move_rows`). separate=True: a tensor each, as a package is exported with (traced on views
    of one tensor, export tied the buffers' length to the example's through their offsets, and the package
    refused longer ones: the growth in tests/test_aot.py's
    test_the_compiled_pass_gives_the_eager_logits_across_pieces_growth_and_rollback)."""
    shape = (2 * model.config.num_hidden_layers, *kv_shape(model, length))
    if separate:
        return [torch.zeros(shape[1:], dtype=dtype, device=device) for _ in range(shape[0])]
    return KVBuffers(torch.zeros(shape, dtype=dtype, device=device))


def move_rows(kv: list[torch.Tensor], src: torch.Tensor, dst: slice) -> None:
    """Copy positions `src` ([k] long) of every KV buffer [1, heads, L, d] to the k positions `dst`, in
    place (the two may overlap: src is read whole first): in one operation over `KVBuffers`, else one per
    buffer (the target's 60, one by one, cost 0.15 ms per iteration of a tree loop on a 2-core CPU,
    `scripts/loop_phases.py`)."""
    if isinstance(kv, KVBuffers):
        kv.whole[:, :, :, dst] = kv.whole.index_select(3, src)
        return
    for buf in kv:
        buf[:, :, dst] = buf.index_select(2, src)


def copy_prefix(old: list[torch.Tensor], new: list[torch.Tensor], used: int) -> None:
    """Copy the first `used` positions of every buffer in `old` ([1, heads, L, d] each) to the same positions
    of `new` ([1, heads, L', d], L' > L): in one operation when both are `KVBuffers`, else one per buffer."""
    if isinstance(old, KVBuffers) and isinstance(new, KVBuffers):
        new.whole[:, :, :, :used] = old.whole[:, :, :, :used]
        return
    for n, o in zip(new, old):
        n[:, :, :used] = o[:, :, :used]


class Counter:
    """0, 1, 2, ... in one tensor, handed out as views: a compiled pass's positions [1, q] and its write
    position (a 0-d tensor), without making new tensors for them every pass. Right after a target pass, which
    has swept the caches, `torch.arange` and `torch.tensor` for them cost about 100 µs on a 2-core CPU, two
    views about 25 (`lab.after_pass`)."""

    def __init__(self, device=None):
        self.values = torch.arange(0, device=device)[None]  # [1, n], grown on demand

    def positions(self, start: int, q: int) -> torch.Tensor:  # -> [1, q]: start, ..., start + q - 1
        if start + q > self.values.shape[1]:
            self.values = torch.arange(max(2 * (start + q), 512), device=self.values.device)[None]
        return self.values[:, start:start + q]

    def scalar(self, n: int) -> torch.Tensor:  # -> [] holding n
        return self.positions(n, 1)[0, 0]

    def columns(self, n: int) -> torch.Tensor:  # -> [n]: 0, ..., n - 1 (mask columns: `aot_chain`)
        return self.positions(0, n)[0]
