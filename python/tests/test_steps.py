"""`steps`: which optimizer steps end a training step, on plain CPU torch (no core: the marks
go nowhere, the decisions are checked)."""

import torch

from ncclsim import steps


def optimizers(n):
    return [torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1) for _ in range(n)]


def ends(order):
    """Which of the optimizer steps in `order` end a step."""
    s = steps._Steps()
    return [s.optimizer_stepped(o) for o in order]


def test_one_optimizer_ends_every_step():
    (a,) = optimizers(1)
    assert ends([a] * 4) == [True] * 4


def test_optimizers_stepping_together_end_one_step():
    # A model in parts, each part's optimizer stepping in every training step.
    a, b, c = optimizers(3)
    assert ends([a, b, c] * 3) == [True, False, False] * 3


def test_a_model_trained_after_another_moves_the_steps_to_its_optimizer():
    a, b = optimizers(2)
    # b's first step joins a's last step; from its second step on, b ends the steps.
    assert ends([a, a, a, b, b, b]) == [True, True, True, False, True, True]


def test_only_optimizers_of_simulated_gpu_parameters_count():
    (a,) = optimizers(1)
    assert steps._Steps().simulated(a) is False
