//! NCCL mode: `ncclTopoTuneModel` (tuning.cc) turned into tables once per communicator, then
//! `ncclTopoGetAlgoTime`, `updateCollCostTable` and `topoGetAlgoInfo` (enqueue.cc) per query.
//!
//! Floating-point types follow NCCL's (`float` tables, a few `double` caps) so that ties and the
//! printed `%.1f` values come out the same.
//!
//! `tuning` holds the tuning model's per-communicator facts and formulas (`Tuning`, `tune`);
//! `lines` the INFO lines it prints at init.

use crate::consts::*;
use crate::error::Result;
use crate::settings::{parse_list, TunerSettings};
use crate::shape::{CommShape, GraphShape, CPU_VENDOR_MIXED};
use crate::types::{DataType, RedOp};
use planner::Pattern;
use serde::Serialize;
use topo::consts::{cpu_arch, cpu_vendor};
use topo::{NcclVersion, PathType};

mod lines;
mod tuning;

/// Per (function, algorithm, protocol) tables, as `comm->bandwidths` / `comm->latencies`.
pub type Table = [[[f32; N_PROTOS]; N_ALGOS]; N_FUNCS];

/// The tuning state of one communicator.
#[derive(Debug, Clone, Serialize)]
pub struct NcclModel {
    /// The communicator.
    pub shape: CommShape,
    /// Constants and rules of the release reproduced.
    pub profile: Profile,
    /// Algorithm bandwidth (GB/s), 0 when the combination is off.
    pub bandwidths: Table,
    /// Latency (µs).
    pub latencies: Table,
    /// `comm->maxThreads[algo][proto]`.
    pub max_threads: [[i32; N_PROTOS]; N_ALGOS],
    /// `comm->threadThresholds[algo][proto]`.
    pub thread_thresholds: [[i64; N_PROTOS]; N_ALGOS],
    /// Protocol enable matrix after `NCCL_PROTO` (2 = LL128 default rule).
    pub proto_enable: [[i32; N_PROTOS]; N_FUNCS],
    /// Algorithm enable matrix after `NCCL_ALGO` and the always-off rules.
    pub algo_enable: [[i32; N_ALGOS]; N_FUNCS],
    /// Whether NCCL_ALGO or NCCL_PROTO was given (NCCL then prints the enable matrix).
    pub user_lists: bool,
    /// INFO lines NCCL prints while tuning (`NCCL_PROTO set by environment to ...`).
    pub env_lines: Vec<String>,
}

/// What `topoGetAlgoInfo` decides for one collective.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AlgoInfo {
    /// Algorithm.
    pub algo: Algo,
    /// Protocol.
    pub proto: Proto,
    /// Modelled time (µs).
    pub time_us: f32,
    /// `nMaxChannels`.
    pub channels: i32,
    /// Threads per block (`nWarps * 32`).
    pub threads: i32,
}

fn log2i(n: u64) -> i32 {
    if n == 0 {
        -1
    } else {
        63 - n.leading_zeros() as i32
    }
}

fn get_nthreads(env: Option<i32>, min: i32, max: i32, def: i32) -> i32 {
    match env {
        Some(nt) if nt > 0 => {
            if nt % WARP_SIZE != 0 || nt > max {
                max
            } else if nt < min {
                min
            } else {
                nt
            }
        }
        _ => def,
    }
}

/// `getNthreads`'s note when a thread-count setting is rejected or clamped.
fn nthreads_note(name: &str, env: Option<i32>, min: i32, max: i32) -> Option<String> {
    let nt = env.filter(|&n| n > 0)?;
    if nt % WARP_SIZE != 0 {
        Some(format!(
            "Invalid {name} {nt} (must be a multiple of {WARP_SIZE})"
        ))
    } else if nt > max {
        Some(format!("Invalid {name} {nt} (maximum {max})."))
    } else if nt < min {
        Some(format!("Invalid {name} {nt} (minimum {min})."))
    } else {
        None
    }
}

impl NcclModel {
    /// Number of algorithms this release has (PAT from 2.23).
    pub fn n_algos(&self) -> usize {
        if self.profile.has_pat {
            N_ALGOS
        } else {
            N_ALGOS - 1
        }
    }

    /// `ncclTopoTuneModel` for a communicator.
    pub fn new(shape: &CommShape, settings: &TunerSettings, version: NcclVersion) -> Result<Self> {
        let profile = Profile::for_version(settings.version.unwrap_or(version));
        let s = shape;
        let mut m = NcclModel {
            shape: s.clone(),
            profile,
            bandwidths: [[[0.0; N_PROTOS]; N_ALGOS]; N_FUNCS],
            latencies: [[[0.0; N_PROTOS]; N_ALGOS]; N_FUNCS],
            max_threads: [[0; N_PROTOS]; N_ALGOS],
            thread_thresholds: [[0; N_PROTOS]; N_ALGOS],
            proto_enable: [[1, 2, 1]; N_FUNCS],
            algo_enable: [[1; N_ALGOS]; N_FUNCS],
            user_lists: false,
            env_lines: Vec::new(),
        };
        m.set_threads(settings);
        // The lists are parsed (and rejected) whatever the communicator size, as NCCL would at
        // its next tuning of a larger one; a bad value is a user error either way.
        m.parse_lists(settings)?;
        if s.n_ranks > 1 {
            m.tune(settings);
            m.apply_enables(settings);
        }
        m.set_thresholds(settings);
        Ok(m)
    }

    fn set_threads(&mut self, st: &TunerSettings) {
        let r = &self.shape.ring;
        let simple_def = if r.bw_intra * r.n_channels as f32 <= PCI_BW {
            256
        } else {
            SIMPLE_MAX_NTHREADS
        };
        let nt = st.nthreads;
        let mt = &mut self.max_threads;
        mt[Algo::Ring as usize][2] =
            get_nthreads(nt, 2 * WARP_SIZE, SIMPLE_MAX_NTHREADS, simple_def);
        mt[Algo::Tree as usize][2] =
            get_nthreads(nt, 2 * WARP_SIZE, SIMPLE_MAX_NTHREADS, SIMPLE_MAX_NTHREADS);
        for a in [
            Algo::CollNetDirect,
            Algo::CollNetChain,
            Algo::Nvls,
            Algo::NvlsTree,
        ] {
            mt[a as usize][2] = MAX_NTHREADS;
        }
        let ll = get_nthreads(nt, 2 * WARP_SIZE, LL_MAX_NTHREADS, LL_MAX_NTHREADS);
        mt[Algo::Ring as usize][0] = ll;
        mt[Algo::Tree as usize][0] = ll;
        let ll128 = get_nthreads(
            st.ll128_nthreads,
            LL128_MAX_NTHREADS / 4,
            LL128_MAX_NTHREADS,
            LL128_MAX_NTHREADS,
        );
        mt[Algo::Ring as usize][1] = ll128;
        mt[Algo::Tree as usize][1] = ll128;
    }

    fn pat_enabled(&self, st: &TunerSettings) -> bool {
        let s = &self.shape;
        if s.min_comp_cap < 60 {
            return false;
        }
        match st.pat_enable.unwrap_or(2) {
            2 => s.n_nodes == s.n_ranks, // host NET devices assumed (no device offload)
            v => v != 0,
        }
    }

    fn net_overhead(&self, st: &TunerSettings) -> f32 {
        if let Some(ns) = st.net_overhead_ns {
            if ns != -2 {
                return ns as f32 * 0.001;
            }
        }
        let s = &self.shape;
        if s.cpu_arch == cpu_arch::X86 && s.cpu_vendor == cpu_vendor::AMD {
            2.0
        } else {
            1.0
        }
    }

    fn parse_lists(&mut self, st: &TunerSettings) -> Result<()> {
        let prefixes = self.profile.func_prefixes;
        if let Some(ps) = &st.proto {
            self.env_lines
                .push(format!("NCCL_PROTO set by environment to {ps}"));
            parse_list(
                "NCCL_PROTO",
                ps,
                &crate::settings::proto_names(),
                prefixes,
                &mut self.proto_enable,
            )?;
            self.user_lists = true;
        }
        if let Some(a) = &st.algo {
            self.env_lines
                .push(format!("NCCL_ALGO set by environment to {a}"));
            let n = self.n_algos();
            let names = crate::settings::algo_names();
            if n == N_ALGOS {
                parse_list("NCCL_ALGO", a, &names, prefixes, &mut self.algo_enable)?;
            } else {
                let six: [&str; N_ALGOS - 1] = std::array::from_fn(|i| names[i]);
                let mut l: [[i32; N_ALGOS - 1]; N_FUNCS] =
                    std::array::from_fn(|f| std::array::from_fn(|i| self.algo_enable[f][i]));
                parse_list("NCCL_ALGO", a, &six, prefixes, &mut l)?;
                for (row, lf) in self.algo_enable.iter_mut().zip(&l) {
                    row[..N_ALGOS - 1].copy_from_slice(lf);
                    row[Algo::Pat as usize] = 0;
                }
            }
            self.user_lists = true;
        }
        Ok(())
    }

    fn apply_enables(&mut self, st: &TunerSettings) {
        let s = self.shape.clone();
        for f in 0..N_FUNCS {
            for a in Algo::ALL {
                let mut disable = s.n_nodes == 1 && a == Algo::NvlsTree;
                if !s.collnet_support
                    && (matches!(a, Algo::CollNetDirect | Algo::CollNetChain)
                        || (a == Algo::Nvls && s.n_nodes > 1))
                {
                    disable = true;
                }
                if !s.has_nvswitch && a == Algo::CollNetDirect {
                    disable = true;
                }
                if disable {
                    self.algo_enable[f][a as usize] = 0;
                }
            }
        }
        let ll128_c2c = st.ll128_c2c.unwrap_or(1) != 0;
        let cudart = st.cudart_version.unwrap_or(12090);
        let graphs = s.graphs();
        for f in 0..N_FUNCS {
            #[allow(clippy::needless_range_loop)] // a indexes graphs and three tables
            for a in 0..N_ALGOS {
                for p in 0..N_PROTOS {
                    let mut pe = self.proto_enable[f][p];
                    if pe == 2 && p == Proto::Ll128 as usize {
                        let g = graphs[a];
                        let mut on = if ll128_c2c && s.min_comp_cap >= 90 {
                            g.type_inter <= PathType::Pxn
                        } else {
                            g.type_inter <= PathType::Pxb
                        };
                        on &= g.type_intra <= PathType::Nvb;
                        on &= s.min_comp_cap == s.max_comp_cap || s.min_comp_cap >= 90;
                        on &= !(s.min_comp_cap < 70
                            || (s.min_comp_cap == 90
                                && cudart == 11080
                                && f == Func::AllReduce as usize
                                && a == Algo::Ring as usize
                                && s.n_ranks == 2));
                        pe = on as i32;
                    }
                    if pe == 0 || self.algo_enable[f][a] == 0 {
                        self.bandwidths[f][a][p] = 0.0;
                    }
                }
            }
        }
    }

    fn set_thresholds(&mut self, st: &TunerSettings) {
        for a in 0..N_ALGOS {
            self.thread_thresholds[a] = [
                LL_THREAD_THRESHOLD,
                LL128_THREAD_THRESHOLD,
                SIMPLE_THREAD_THRESHOLD,
            ];
        }
        self.thread_thresholds[Algo::Ring as usize][0] *= self.shape.n_ranks as i64;
        self.thread_thresholds[Algo::CollNetDirect as usize][2] = 512;
        self.thread_thresholds[Algo::CollNetChain as usize][2] = 512;
        if let Some(t) = &st.thread_thresholds {
            // sscanf("%ld %ld %ld %ld %ld %ld"): stops at the first token that is not a number.
            let vals: Vec<i64> = t
                .split_whitespace()
                .map_while(|x| x.parse::<i64>().ok())
                .collect();
            for (i, v) in vals.iter().take(6).enumerate() {
                if *v >= 0 {
                    self.thread_thresholds[i / 3][i % 3] = *v;
                }
            }
        }
    }

    /// `ncclTopoGetAlgoTime`: µs, or -1 when the combination is unavailable.
    pub fn algo_time(&self, f: Func, a: Algo, p: Proto, n_bytes: u64, num_pipe_ops: usize) -> f32 {
        match self.lat_bw(f, a, p, n_bytes, num_pipe_ops) {
            None => -1.0,
            Some((lat, bw)) => lat + n_bytes as f32 / (1000.0 * bw),
        }
    }

    /// The two halves of `ncclTopoGetAlgoTime` after its size corrections: (latency µs times the
    /// latency count, algorithm bandwidth GB/s); `None` when the combination is unavailable.
    pub fn lat_bw(
        &self,
        f: Func,
        a: Algo,
        p: Proto,
        n_bytes: u64,
        num_pipe_ops: usize,
    ) -> Option<(f32, f32)> {
        let (fi, ai, pi) = (f as usize, a as usize, p as usize);
        let mut bw = self.bandwidths[fi][ai][pi];
        let mut lat = self.latencies[fi][ai][pi];
        if bw == 0.0 {
            return None;
        }
        let log_size = log2i(n_bytes >> 6);
        if a == Algo::Tree && f == Func::AllReduce && (0..23).contains(&log_size) {
            bw *= TREE_CORRECTION[pi][log_size as usize];
        }
        if self.profile.nvls_tree_correction
            && a == Algo::NvlsTree
            && f == Func::AllReduce
            && (0..24).contains(&log_size)
            && self.shape.min_comp_cap >= 100
            && self.shape.cpu_arch == cpu_arch::X86
        {
            bw *= TREE_CORRECTION[pi][log_size as usize];
        }
        let s = &self.shape;
        if a == Algo::Ring
            && p == Proto::Simple
            && s.n_nodes > 1
            && f == Func::AllReduce
            && n_bytes / (s.n_channels as u64 * s.n_ranks as u64).max(1) >= 64
        {
            lat *= if s.min_comp_cap < 80 { 1.9 } else { 1.4 };
        }
        let lat_count = if a == Algo::Ring {
            num_pipe_ops
        } else {
            num_pipe_ops.div_ceil(MAX_DEV_WORK_BATCH_COLLS)
        };
        Some((lat * lat_count as f32, bw))
    }

    /// `updateCollCostTable`: the table a tuner plugin receives (µs; [`ALGO_PROTO_IGNORE`] for
    /// combinations NCCL does not consider, -1 from `algo_time` for disabled ones).
    pub fn cost_table(
        &self,
        f: Func,
        n_bytes: u64,
        dtype: DataType,
        op: RedOp,
        num_pipe_ops: usize,
    ) -> [[f32; N_PROTOS]; N_ALGOS] {
        let mut t = [[ALGO_PROTO_IGNORE; N_PROTOS]; N_ALGOS];
        let s = &self.shape;
        if s.n_ranks == 1 {
            t[Algo::Ring as usize][Proto::Simple as usize] = 0.0;
            return t;
        }
        let collnet = s.collnet_support;
        let nvls = s.nvls_support && (op.nvls_supported(dtype) || f == Func::AllGather);
        for a in Algo::ALL {
            if a == Algo::Pat && !self.profile.has_pat {
                continue;
            }
            if matches!(a, Algo::CollNetDirect | Algo::CollNetChain) && !collnet {
                continue;
            }
            if matches!(a, Algo::CollNetDirect | Algo::CollNetChain)
                && s.max_local_ranks() > MAX_DIRECT_ARITY + 1
            {
                continue;
            }
            if matches!(a, Algo::Nvls | Algo::NvlsTree)
                && (!nvls || (f != Func::AllReduce && s.local_ranks0() > MAX_NVLS_ARITY))
            {
                continue;
            }
            if a == Algo::Nvls && !collnet && s.n_nodes > 1 {
                continue;
            }
            if a == Algo::Pat && f == Func::ReduceScatter && op.is_scaled(dtype) {
                continue;
            }
            for p in Proto::ALL {
                let time = self.algo_time(f, a, p, n_bytes, num_pipe_ops);
                t[a as usize][p as usize] = time * self.selection_penalty(dtype, a);
            }
        }
        t
    }

    /// The factor NCCL 2.30 multiplies an algorithm's time by only to steer its choice
    /// (`src/graph/tuning.cc`, `ncclTopoGetAlgoTime`: rings of fp8 data over more than 8 ranks,
    /// x1024, for their accumulated rounding); the operation itself takes the unscaled time.
    pub fn selection_penalty(&self, dtype: DataType, a: Algo) -> f32 {
        if dtype.is_fp8() && a == Algo::Ring && self.shape.n_ranks > 8 {
            1024.0
        } else {
            1.0
        }
    }

    /// `topoGetAlgoInfo`: the minimum-time entry (ties keep the lower algorithm, then protocol),
    /// then the channels and threads NCCL launches with. `None` when nothing is available.
    pub fn algo_info(&self, table: &[[f32; N_PROTOS]; N_ALGOS], n_bytes: u64) -> Option<AlgoInfo> {
        let mut min_time = f32::MAX;
        let mut best: Option<(usize, usize)> = None;
        for (a, row) in table.iter().enumerate() {
            for (p, &t) in row.iter().enumerate() {
                if t == ALGO_PROTO_IGNORE {
                    continue;
                }
                if t >= 0.0 && t < min_time {
                    best = Some((a, p));
                    min_time = t;
                }
            }
        }
        let (ai, pi) = best?;
        Some(self.launch_shape(
            Algo::from_index(ai),
            Proto::from_index(pi),
            min_time,
            n_bytes,
        ))
    }

    /// Channels and threads for a chosen algorithm/protocol (second half of `topoGetAlgoInfo`).
    pub fn launch_shape(&self, algo: Algo, proto: Proto, time_us: f32, n_bytes: u64) -> AlgoInfo {
        let s = &self.shape;
        let (ai, pi) = (algo as usize, proto as usize);
        let mut nc = s.n_channels.max(1) as i64;
        let mut nt = self.max_threads[ai][pi] as i64;
        let mut th = self.thread_thresholds[ai][pi];
        let nb = n_bytes as i64;
        match algo {
            Algo::CollNetDirect => {
                let heads = s.collnet_direct.n_channels.max(1) as i64;
                let mut nc_switch = 16;
                let mut flag = true;
                while nc_switch >= 1 && flag {
                    loop {
                        flag = nb < nc * nt * heads * th;
                        if !(flag && nc > nc_switch) {
                            break;
                        }
                        if nc == nc_switch + nc_switch / 2 {
                            th /= 2;
                        }
                        nc -= 1;
                    }
                    nc_switch /= 2;
                }
            }
            Algo::Nvls | Algo::NvlsTree => {
                nc = if s.n_nodes > 1 && algo == Algo::Nvls {
                    s.nvls_channels.min(s.n_channels) as i64
                } else {
                    s.nvls_channels as i64
                };
            }
            _ => {
                while nb < nc * nt * th && nc >= 2 {
                    nc -= 1;
                }
            }
        }
        if !matches!(algo, Algo::Nvls | Algo::NvlsTree | Algo::CollNetDirect) {
            while nb < nc * nt * th && nt % 128 == 0 {
                nt /= 2;
            }
        }
        if proto == Proto::Simple {
            if algo == Algo::Ring {
                nt += WARP_SIZE as i64;
            }
            if algo == Algo::Tree {
                nt += 4 * WARP_SIZE as i64;
            }
        }
        if nt / (WARP_SIZE as i64) < 3 {
            nt = 3 * WARP_SIZE as i64;
        }
        if matches!(algo, Algo::Tree | Algo::Pat) {
            nt = MAX_NTHREADS as i64;
        }
        AlgoInfo {
            algo,
            proto,
            time_us,
            channels: nc as i32,
            threads: (nt / WARP_SIZE as i64 * WARP_SIZE as i64) as i32,
        }
    }
}
