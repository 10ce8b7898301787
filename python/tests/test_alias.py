"""`alias.is_dense` (whether `empty_strided` can reproduce a result's layout: contiguous, or its
elements cover their storage exactly once from offset 0), checked against the offsets each
element addresses; and `_storage_view`, a CPU tensor over given memory."""

import itertools

import torch

from ncclsim.compute import alias


def covers_storage_once(t: torch.Tensor) -> bool:
    """Whether the element offsets of `t` are exactly 0 .. storage length - 1, once each."""
    offsets = sorted(
        t.storage_offset() + sum(i * s for i, s in zip(index, t.stride()))
        for index in itertools.product(*(range(n) for n in t.shape))
    )
    return offsets == list(range(t.untyped_storage().nbytes() // t.element_size()))


def cases():
    x = torch.arange(24.0).reshape(2, 3, 4)
    return {
        "contiguous": x,
        "transposed": x.transpose(0, 2),
        "permuted (channels-last)": torch.zeros(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
        "leading rows (contiguous, part of the storage)": x[:1],
        "trailing rows (offset)": x[1:].transpose(1, 2),
        "every other column": x[:, :, ::2],
        "broadcast": torch.zeros(3, 1).expand(3, 4),
        "one element, broadcast": torch.zeros(1).expand(1, 1).t(),
        "column of a matrix": x[0, :, 1],
    }


def test_is_dense_matches_the_offsets():
    for name, t in cases().items():
        assert alias.is_dense(t) == (t.is_contiguous() or covers_storage_once(t)), name


def test_dense_layouts_are_reproduced_by_empty_strided():
    for name, t in cases().items():
        if alias.is_dense(t):
            copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
            copy.copy_(t)
            assert copy.stride() == t.stride() and torch.equal(copy, t), name
            assert copy.untyped_storage().nbytes() == t.numel() * t.element_size() or t.is_contiguous(), name


def test_storage_view_aliases_the_memory():
    x = torch.arange(6, dtype=torch.int32)
    v = alias._storage_view(x.data_ptr(), x.nbytes, torch.int32)
    assert torch.equal(v, x)
    v[2] = 100
    assert x[2].item() == 100
    assert alias._storage_view(x.data_ptr(), x.nbytes, torch.int32) is v  # cached per storage
    del alias._views[(x.data_ptr(), x.nbytes, torch.int32)]  # x's memory is freed after the test
    assert alias._storage_view(0, 0, torch.float32).numel() == 0
