"""Compares an all-real run of fold.py with the folded run: every real rank's final
parameters and losses are bit-identical, every step's time on the GPU and the peak memory are
equal, and the folded run wrote no virtual rank's file.

Usage: check_fold.py ALL_DIR FOLDED_DIR REAL_RANKS JOB_RANKS
"""

import os
import sys

import torch

all_dir, folded_dir, real, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for r in range(ranks):
    f = os.path.join(folded_dir, f"rank{r}.pt")
    if r >= real:
        assert not os.path.exists(f), f"virtual rank {r} ran"
        continue
    a = torch.load(os.path.join(all_dir, f"rank{r}.pt"))
    b = torch.load(f)
    assert a["world"] == b["world"] == ranks, (a["world"], b["world"])
    assert torch.equal(a["params"], b["params"]), f"rank {r}: parameters differ"
    assert a["losses"] == b["losses"], f"rank {r}: losses {a['losses']} vs {b['losses']}"
    assert len(a["times"]) == 15 and a["times"] == b["times"], f"rank {r}: step times {a['times']} vs {b['times']}"
    assert a["peak"] == b["peak"] > 0, f"rank {r}: peak memory {a['peak']} vs {b['peak']}"
print(f"fold: {real} real ranks of {ranks} equal the all-real run")
