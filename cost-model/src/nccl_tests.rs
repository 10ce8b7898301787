//! nccl-tests output format.
