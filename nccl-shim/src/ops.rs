//! Operations as the runtime queues them: what each collective or point-to-point call asked
//! for (communicator, kind, type, count, reduction, root or peer, buffers, stream), and the
//! PreMulSum reductions a communicator created.

use crate::error::{NcclError, Result};
use crate::types::{residence, Collective, DataType, RedOp, Reduction};
use std::collections::HashMap;

/// A collective call.
#[derive(Debug, Clone, Copy)]
pub struct Coll {
    /// Which collective (never `SendRecv`: sends and receives are [`P2p`]).
    pub kind: Collective,
    /// Element type.
    pub dtype: DataType,
    /// Reduction (reducing collectives).
    pub red: Reduction,
    /// The `ncclRedOp_t` the caller passed (to compare across ranks).
    pub op: i32,
    /// Root rank (rooted collectives), else 0.
    pub root: usize,
    /// NCCL's count argument.
    pub count: usize,
    /// Send buffer (device address, 0 when unused).
    pub send: usize,
    /// Receive buffer.
    pub recv: usize,
}

/// A send or receive.
#[derive(Debug, Clone, Copy)]
pub struct P2p {
    /// Send (true) or receive.
    pub send: bool,
    /// The peer rank.
    pub peer: usize,
    /// Bytes.
    pub bytes: usize,
    /// The buffer.
    pub buf: usize,
}

/// One queued operation of a communicator, with its stream.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// A collective.
    Coll(Coll),
    /// A point-to-point transfer.
    P2p(P2p),
}

/// A PreMulSum reduction created with `ncclRedOpCreatePreMulSum`.
#[derive(Debug, Clone, Copy)]
pub struct PreMulSum {
    /// Element type it was created for.
    pub dtype: DataType,
    /// The scalar's bits, if given as a host value.
    pub host_scalar: Option<u64>,
    /// Device address of the scalar, read when an operation runs.
    pub device_scalar: usize,
}

/// A communicator's created reductions.
#[derive(Debug, Default)]
pub struct RedOps {
    next: i32,
    ops: HashMap<i32, PreMulSum>,
}

impl RedOps {
    /// Registers a PreMulSum op; returns its `ncclRedOp_t`.
    ///
    /// # Safety
    /// With `ncclScalarHostImmediate`, a non-null `scalar` must point to one readable element
    /// of `dtype` (a device scalar is only kept, and read when an operation runs).
    pub unsafe fn create(&mut self, dtype: DataType, scalar: usize, res: i32) -> Result<i32> {
        if scalar == 0 {
            return Err(NcclError::invalid_argument(
                "ncclRedOpCreatePreMulSum: scalar is NULL",
            ));
        }
        let def = match res {
            residence::HOST_IMMEDIATE => {
                let mut b = [0u8; 8];
                // SAFETY: the host scalar holds one element of `dtype` (this function's contract).
                unsafe { std::ptr::copy_nonoverlapping(scalar as *const u8, b.as_mut_ptr(), dtype.size()) };
                PreMulSum { dtype, host_scalar: Some(u64::from_le_bytes(b)), device_scalar: 0 }
            }
            residence::DEVICE => PreMulSum { dtype, host_scalar: None, device_scalar: scalar },
            r => {
                return Err(NcclError::invalid_argument(format!(
                    "ncclRedOpCreatePreMulSum: residence {r} is not ncclScalarDevice or ncclScalarHostImmediate"
                )))
            }
        };
        if self.ops.len() >= 1 << 20 {
            return Err(NcclError::invalid_usage(
                "too many PreMulSum ops alive on this communicator",
            ));
        }
        let id = RedOp::FIRST_DYNAMIC + self.next;
        self.next = self.next.wrapping_add(1) % (RedOp::MAX_VALUE - RedOp::FIRST_DYNAMIC);
        self.ops.insert(id, def);
        Ok(id)
    }

    /// Destroys one.
    pub fn destroy(&mut self, op: i32) -> Result<()> {
        if !RedOp::is_dynamic(op) {
            return Err(NcclError::invalid_argument(format!(
                "ncclRedOpDestroy: op {op} is a built-in operation"
            )));
        }
        self.ops.remove(&op).map(|_| ()).ok_or_else(|| {
            NcclError::invalid_argument(format!(
                "ncclRedOpDestroy: op {op} was not created on this communicator"
            ))
        })
    }

    /// The reduction `op` means for `dtype` on `nranks` ranks.
    pub fn resolve(&self, op: i32, dtype: DataType, nranks: usize) -> Result<Reduction> {
        Ok(match RedOp::try_from(op) {
            Ok(builtin) => Reduction::builtin(builtin, dtype, nranks),
            Err(_) => {
                let d = self.ops.get(&op).ok_or_else(|| {
                    NcclError::invalid_argument(format!(
                        "reduction op {op} is not a valid ncclRedOp_t on this communicator"
                    ))
                })?;
                if d.dtype != dtype {
                    return Err(NcclError::invalid_argument(format!(
                        "PreMulSum op {op} was created for {:?}, used with {:?}",
                        d.dtype, dtype
                    )));
                }
                match d.host_scalar {
                    Some(s) => Reduction::PreMulSum {
                        scalar: s,
                        on_device: false,
                    },
                    // Read when the operation runs (stream order), see `exec`.
                    None => Reduction::PreMulSum {
                        scalar: d.device_scalar as u64,
                        on_device: true,
                    },
                }
            }
        })
    }
}
