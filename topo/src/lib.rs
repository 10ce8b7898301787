//! NCCL topology XML in and out, the topology graph, and NCCL's paths.
