//! The query API: a communicator's cost model built once, then (collective, bytes, type, op) ->
//! algorithm, protocol, channels, threads, time, algbw, busbw in about a microsecond.

use crate::calibrated::Calibration;
use crate::consts::{Algo, Func, Proto};
use crate::error::{CostError, Result};
use crate::model::{AlgoInfo, NcclModel};
use crate::p2p::P2pPaths;
use crate::settings::TunerSettings;
use crate::shape::CommShape;
use crate::types::{Collective, DataType, RedOp};
use planner::CommPlan;
use serde::Serialize;
use std::str::FromStr;
use topo::NcclVersion;

/// Which timing model answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// NCCL's own tuning model, exactly.
    Nccl,
    /// NCCL's selection with times from the calibrated model (see `calibrated`).
    Calibrated,
}

impl FromStr for Mode {
    type Err = CostError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "nccl" => Ok(Mode::Nccl),
            "calibrated" | "cal" => Ok(Mode::Calibrated),
            _ => Err(CostError::Query(format!(
                "unknown mode \"{s}\" (expected nccl or calibrated)"
            ))),
        }
    }
}

/// One predicted operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// What was priced.
    pub collective: Collective,
    /// Bytes (nccl-tests' size column; NCCL's nBytes for the tuned functions).
    pub bytes: u64,
    /// Algorithm (`P2P` for point-to-point patterns).
    pub algo: &'static str,
    /// Protocol.
    pub proto: &'static str,
    /// Channels launched.
    pub channels: i32,
    /// Threads per channel.
    pub threads: i32,
    /// Time in µs.
    pub time_us: f64,
    /// GB/s of user data (`bytes / time`).
    pub algbw: f64,
    /// nccl-tests bus bandwidth.
    pub busbw: f64,
}

/// A communicator's cost model.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// NCCL's tables.
    pub nccl: NcclModel,
    /// Settings it was built with.
    pub settings: TunerSettings,
    /// Timing mode.
    pub mode: Mode,
    /// Calibrated parameters for this communicator's hardware class.
    pub calibration: Calibration,
    /// Point-to-point paths.
    pub p2p: P2pPaths,
    /// Calibrated mode: the reference release's tables it prices with when `nccl` is an older
    /// release's (`calibrated::pricing_model`).
    pub pricing: Option<Box<NcclModel>>,
    /// Calibrated mode on NVLink domains joined by NET (multi-node NVLink, several nodes): one
    /// domain alone, whose NVLS AllReduce NVLSTree across the domains cannot beat.
    domain: Option<Box<DomainBound>>,
}

/// One NVLink domain of a multi-node NVLink communicator, priced as a communicator of its own
/// (the `mnnvl` class). NVLSTree across domains moves each GPU's data through the domain's
/// NVLink switches as NVLS on that domain alone does (reduce into the switch, multicast back),
/// and its tree over the network besides, so its time is at least that domain's NVLS time.
#[derive(Debug, Clone)]
struct DomainBound {
    nccl: NcclModel,
    calibration: Calibration,
    pricing: Option<Box<NcclModel>>,
}

impl DomainBound {
    fn of(shape: &CommShape, settings: &TunerSettings, version: NcclVersion) -> Option<Self> {
        if !(shape.mnnvl && shape.n_nodes > 1 && shape.nvls_support) {
            return None;
        }
        let one = shape.first_node();
        let nccl = NcclModel::new(&one, settings, version).ok()?;
        Some(DomainBound {
            calibration: Calibration::for_shape(&one),
            pricing: crate::calibrated::pricing_model(&nccl, settings).map(Box::new),
            nccl,
        })
    }

    fn nvls_time_us(&self, f: Func, bytes: u64) -> f64 {
        let pricing = self.pricing.as_deref();
        let (a, p) = (Algo::Nvls, Proto::Simple);
        self.calibration
            .time_us(&self.nccl, pricing, f, a, p, bytes)
    }
}

impl CostModel {
    /// Build from a shape.
    pub fn new(
        shape: &CommShape,
        settings: &TunerSettings,
        version: NcclVersion,
        mode: Mode,
    ) -> Result<Self> {
        let nccl = NcclModel::new(shape, settings, version)?;
        let p2p = P2pPaths::new(shape, &nccl.profile);
        let pricing = match mode {
            Mode::Calibrated => crate::calibrated::pricing_model(&nccl, settings).map(Box::new),
            Mode::Nccl => None,
        };
        let domain = match mode {
            Mode::Calibrated => DomainBound::of(shape, settings, version).map(Box::new),
            Mode::Nccl => None,
        };
        Ok(CostModel {
            pricing,
            domain,
            // NCCL mode never reads the calibration (and the fit itself builds NCCL-mode models).
            calibration: match mode {
                Mode::Calibrated => Calibration::for_shape(shape),
                Mode::Nccl => Calibration::identity(shape),
            },
            nccl,
            settings: settings.clone(),
            mode,
            p2p,
        })
    }

    /// Build from a planned communicator (its NCCL version unless the settings name one).
    pub fn from_plan(plan: &CommPlan, settings: &TunerSettings, mode: Mode) -> Result<Self> {
        let v = plan
            .nccl_version
            .parse::<NcclVersion>()
            .unwrap_or(NcclVersion::DEFAULT);
        Self::new(&CommShape::from_plan(plan), settings, v, mode)
    }

    /// Every INFO line NCCL prints at init for `rank` of `plan`: the planner's (graphs, rings,
    /// trees, channels) with what `ncclTopoTuneModel` prints in its place (the TUNING table on
    /// rank 0, `threadThresholds`). What `ncclsim plan --format info` and the runtime print;
    /// `comm` is the communicator pointer the `comm %p rank ...` line shows
    /// (`planner::format::PLANNER_COMM` without a communicator object).
    pub fn init_info_lines(&self, plan: &CommPlan, rank: usize, comm: u64) -> Vec<String> {
        let tuning = self.nccl.init_lines(&self.settings, rank);
        planner::format::info_lines_with(plan, rank, comm, &tuning)
    }

    /// The communicator.
    pub fn shape(&self) -> &CommShape {
        &self.nccl.shape
    }

    fn finish(&self, coll: Collective, bytes: u64, info: AlgoInfo, time_us: f64) -> Prediction {
        let algbw = if time_us > 0.0 {
            bytes as f64 / time_us / 1000.0
        } else {
            0.0
        };
        Prediction {
            collective: coll,
            bytes,
            algo: info.algo.name(),
            proto: info.proto.name(),
            channels: info.channels,
            threads: info.threads,
            time_us,
            algbw,
            busbw: algbw * coll.busbw_factor(self.shape().n_ranks),
        }
    }

    fn time_for(&self, f: Func, info: &AlgoInfo, bytes: u64, dtype: DataType) -> f64 {
        match self.mode {
            // NCCL's time for the chosen entry, without the factor that only steers its choice.
            Mode::Nccl => {
                info.time_us as f64 / self.nccl.selection_penalty(dtype, info.algo) as f64
            }
            Mode::Calibrated => {
                let t = self.calibration.time_us(
                    &self.nccl,
                    self.pricing.as_deref(),
                    f,
                    info.algo,
                    info.proto,
                    bytes,
                );
                match &self.domain {
                    Some(d) if info.algo == Algo::NvlsTree && f == Func::AllReduce => {
                        t.max(d.nvls_time_us(f, bytes))
                    }
                    _ => t,
                }
            }
        }
    }

    /// Predict one operation with NCCL's selection.
    pub fn predict(
        &self,
        coll: Collective,
        bytes: u64,
        dtype: DataType,
        op: RedOp,
    ) -> Result<Prediction> {
        let Some(f) = coll.func() else {
            return Ok(self.predict_p2p(coll, bytes));
        };
        if bytes == 0 {
            return Ok(self.finish(
                coll,
                0,
                AlgoInfo {
                    algo: Algo::Ring,
                    proto: Proto::Simple,
                    time_us: 0.0,
                    channels: 0,
                    threads: 0,
                },
                0.0,
            ));
        }
        let table = self.nccl.cost_table(f, bytes, dtype, op, 1);
        let info = self.nccl.algo_info(&table, bytes).ok_or_else(|| {
            let mut msg = format!(
                "No algorithm/protocol available for function {} with datatype {}.",
                f.name(),
                dtype.name()
            );
            if let Some(a) = &self.settings.algo {
                msg += &format!(" NCCL_ALGO was set to {a}.");
            }
            if let Some(p) = &self.settings.proto {
                msg += &format!(" NCCL_PROTO was set to {p}.");
            }
            CostError::Query(msg)
        })?;
        let t = self.time_for(f, &info, bytes, dtype);
        Ok(self.finish(coll, bytes, info, t))
    }

    /// Every (algorithm, protocol) NCCL would consider for this operation, each priced as if it
    /// had been chosen (the lines of `--plot`). Empty for point-to-point patterns.
    pub fn candidates(
        &self,
        coll: Collective,
        bytes: u64,
        dtype: DataType,
        op: RedOp,
    ) -> Vec<Prediction> {
        let Some(f) = coll.func() else {
            return Vec::new();
        };
        let table = self.nccl.cost_table(f, bytes.max(1), dtype, op, 1);
        let mut out = Vec::new();
        for (a, row) in table.iter().enumerate() {
            for (p, &t) in row.iter().enumerate() {
                if t < 0.0 {
                    continue;
                }
                let info =
                    self.nccl
                        .launch_shape(Algo::from_index(a), Proto::from_index(p), t, bytes);
                let time = self.time_for(f, &info, bytes, dtype);
                out.push(self.finish(coll, bytes, info, time));
            }
        }
        out
    }

    /// One rank's grouped sends and receives, by where its peers are: `intra` bytes with peers
    /// on its node, `inter` bytes with peers on other nodes (see [`crate::p2p::P2pPaths::pair_time_us`]).
    pub fn predict_peers(&self, intra: u64, inter: u64) -> Prediction {
        let t = self.p2p.pair_time_us(intra, inter);
        self.p2p_prediction(Collective::SendRecv, intra + inter, t)
    }

    /// Point-to-point patterns.
    pub fn predict_p2p(&self, coll: Collective, bytes: u64) -> Prediction {
        let t = self.p2p.time_us(self.shape(), coll, bytes);
        self.p2p_prediction(coll, bytes, t)
    }

    /// A p2p pattern's prediction from its time in NCCL mode (`t`, µs): calibrated when asked
    /// for, on the p2p channels per peer with the Simple protocol.
    fn p2p_prediction(&self, coll: Collective, bytes: u64, mut t: f64) -> Prediction {
        if self.mode == Mode::Calibrated {
            t = self.calibration.p2p_time_us(t, bytes);
        }
        let info = AlgoInfo {
            algo: Algo::Ring,
            proto: Proto::Simple,
            time_us: t as f32,
            channels: self.shape().p2p_channels_per_peer.max(1) as i32,
            threads: crate::consts::SIMPLE_MAX_NTHREADS,
        };
        let mut p = self.finish(coll, bytes, info, if bytes == 0 { 0.0 } else { t });
        p.algo = "P2P";
        p
    }
}
