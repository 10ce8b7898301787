//! NCCL's tuning model (per algorithm/protocol latency and bandwidth), selection, a calibrated
//! model, point-to-point and group estimates, and the formats built on them (the TUNING table,
//! nccl-tests tables).
//!
//! Reproduces NCCL 2.30.7 (`src/graph/tuning.cc` `ncclTopoTuneModel` / `ncclTopoGetAlgoTime`,
//! `src/enqueue.cc` `updateCollCostTable` / `topoGetAlgoInfo`), with older releases' constants
//! behind [`consts::Profile`]. Sits above `planner` (its input is a [`planner::CommPlan`], read
//! through [`CommShape`]) and below `cli` and `nccl-shim`.
//!
//! ```
//! use cost_model::*;
//! use cost_model::calibration::System;
//! let shape = System::DgxA100.shape(1, 8, false);
//! let m = CostModel::new(&shape, &TunerSettings::default(), topo::NcclVersion::DEFAULT, Mode::Nccl).unwrap();
//! let p = m.predict(Collective::AllReduce, 1 << 30, DataType::Float32, RedOp::Sum).unwrap();
//! assert_eq!((p.algo, p.proto), ("Ring", "Simple"));
//! ```

#![forbid(unsafe_code)]

pub mod accuracy;
pub mod calibrated;
pub mod calibration;
pub mod consts;
pub mod edit;
pub mod error;
pub mod group;
pub mod model;
pub mod nccl_tests;
pub mod p2p;
pub mod query;
pub mod settings;
pub mod shape;
pub mod types;

pub use consts::{Algo, Func, Profile, Proto};
pub use error::{CostError, Result};
pub use group::{GroupEstimate, GroupOp};
pub use model::{AlgoInfo, NcclModel};
pub use planner;
pub use query::{CostModel, Mode, Prediction};
pub use settings::TunerSettings;
pub use shape::{CommShape, GraphShape};
pub use types::{Collective, DataType, RedOp};
