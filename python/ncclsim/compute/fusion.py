"""`torch.compile` on the simulated GPUs: compiled code computed op by op and priced as the
kernels inductor would generate for it.

Inductor (torch.compile's default backend) writes Triton kernels, which cannot run here. The
`ncclsim` backend that replaces it lets Dynamo trace and AOT autograd split the forward and the
backward into aten graphs, as inductor gets them, and runs each graph node by node on the
simulated GPU's kernels (values exact). Pricing follows inductor's kernels, a documented
approximation of its scheduler (torch/_inductor/scheduler.py, torch 2.15):

- a run of consecutive pointwise ops (`torch.Tag.pointwise`), reductions and normalisations
  (sums, means, extrema, variances, softmax and layer norm, forward and backward), casts,
  copies and fills, with the views between them, is one kernel: its FLOPs the ops' FLOPs, its
  bytes the run's inputs from outside it read once and its results used outside it (by a
  later op or as the graph's outputs) written once; the intermediates stay in registers;
- FlexAttention (the `flex_attention` higher-order op and its backward) is one fused
  attention kernel, priced as FlashAttention on its shapes (FLOPs from
  `torch.utils.flop_counter`'s attention formulas, scaled by the block mask's density when its
  block counts are defined), instead of the dense reference that computes it here;
- every other op (matrix products, convolutions, attention, collectives, random draws) is its
  own kernel, as in eager mode.

A fused kernel is named as inductor names them: `triton_poi_fused_<ops>` for pointwise runs,
`triton_red_fused_<ops>` for runs with a reduction.
"""

from __future__ import annotations

import torch

from . import timing

# Reductions and normalisations inductor generates as reduction kernels fused with their
# pointwise neighbours (aten op names without overload).
_REDUCTIONS = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "prod", "var", "var_mean", "std", "std_mean",
    "logsumexp", "linalg_vector_norm", "norm", "_softmax", "_log_softmax",
    "_softmax_backward_data", "_log_softmax_backward_data", "native_layer_norm",
    "native_layer_norm_backward", "native_group_norm", "native_group_norm_backward",
    "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional", "_fused_rms_norm", "_fused_rms_norm_backward",
})
# Ops inductor writes as pointwise code that carry no pointwise tag: casts, copies, fills.
_POINTWISE = frozenset({
    "_to_copy", "clone", "copy", "copy_", "fill", "fill_", "zeros_like", "ones_like", "full_like",
    "empty_like", "zeros", "ones", "full", "empty", "new_zeros", "new_ones", "new_empty", "alias",
    "native_dropout", "native_dropout_backward", "where", "masked_fill", "threshold_backward",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
})


def _base(target) -> str | None:
    name = getattr(target, "_schema", None)
    if name is None:
        return None
    return name.name.split("::", 1)[-1]


def kind(target) -> str | None:
    """`pointwise`, `reduction` or `view` for an aten op inductor fuses, else None."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    base = _base(target)
    if base in _REDUCTIONS:
        return "reduction"
    if torch.Tag.pointwise in target.tags or base in _POINTWISE:
        return "pointwise"
    if target.is_view or torch.Tag.view_copy in target.tags:
        return "view"
    return None


def is_flex(target) -> bool:
    """Whether `target` is FlexAttention's higher-order op or its backward."""
    return getattr(target, "__name__", None) in ("flex_attention", "flex_attention_backward")


class Run:
    """Consecutive fusible nodes of a graph: one kernel."""

    def inputs_of(self, n) -> list:
        """The nodes from outside the run that member `n` is the first to read."""
        return self._first_reads[n]

    def __init__(self, nodes: list) -> None:
        self.nodes = nodes
        members = set(nodes)
        self.last = nodes[-1]
        # Results read after the run (by a later node or as the graph's outputs).
        self.outputs = {n for n in nodes if any(u not in members for u in n.users)}
        # Per member, its inputs read from outside the run for the first time.
        self._first_reads: dict = {}
        read: set = set()
        for n in nodes:
            self._first_reads[n] = [a for a in n.all_input_nodes
                                    if a not in members and a not in read]
            read.update(self._first_reads[n])
        ops = [_base(n.target) for n in nodes if kind(n.target) != "view"]
        reduction = any(kind(n.target) == "reduction" for n in nodes)
        short = "_".join(dict.fromkeys(o.lstrip("_").replace("native_", "") for o in ops))[:80]
        self.name = f"triton_{'red' if reduction else 'poi'}_fused_{short}"


def runs(graph) -> dict:
    """Each node of a run of two or more fusible ops mapped to its run."""
    out: dict = {}
    current: list = []

    def close():
        if sum(kind(n.target) != "view" for n in current) >= 2:
            r = Run(list(current))
            for n in current:
                out[n] = r
        current.clear()

    for n in graph.nodes:
        if n.op == "call_function" and kind(n.target) is not None:
            current.append(n)
        else:
            close()
    close()
    return out


class _Interpreter(torch.fx.Interpreter):
    """Runs an aten graph node by node, its fused runs and FlexAttention priced as one kernel
    each."""

    def __init__(self, gm, fused: dict) -> None:
        super().__init__(gm)
        self.fused = fused
        self.pending: dict = {}  # run -> [its ops so far (a timing.Fused), its bytes so far]

    def run_node(self, n):
        run = self.fused.get(n)
        flex = run is None and n.op == "call_function" and is_flex(n.target)
        if run is None and not flex:
            return super().run_node(n)
        if flex:  # one attention kernel; its dense implementation computes the values
            args, _ = self.fetch_args_kwargs_from_env(n)
            with timing.Fused() as ops:
                r = super().run_node(n)
            timing.price_flex(n.target.__name__ == "flex_attention_backward", args, r, ops)
            return r
        pending = self.pending.setdefault(run, [timing.Fused(), 0])
        ops = pending[0]
        # Its inputs from outside the run, read before the interpreter frees them.
        pending[1] += sum(timing.nbytes_of(self.env.get(a)) for a in run.inputs_of(n))
        with ops:
            r = super().run_node(n)
        if n in run.outputs:
            pending[1] += timing.nbytes_of(r)
        if n is run.last:
            del self.pending[run]
            timing.price_fused(run.name, ops.flops, pending[1], ops)
        return r


def compiler(gm, example_inputs):
    """AOT autograd's forward and backward compiler: the graph run by `_Interpreter`."""
    fused = runs(gm.graph)

    def run(args):
        return _Interpreter(gm, fused).boxed_run(args)

    run._boxed_call = True
    return run


def backend():
    """The `ncclsim` torch.compile backend: Dynamo, AOT autograd with inductor's partitioner
    (what the backward needs is recomputed from the forward's inputs where that is cheaper
    than saving it, as inductor's graphs do), `compiler` for both graphs."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                        partition_fn=min_cut_rematerialization_partition)
