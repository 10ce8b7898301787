//! NCCL mode: `ncclTopoTuneModel` (tuning.cc) turned into tables once per communicator, then
//! `ncclTopoGetAlgoTime`, `updateCollCostTable` and `topoGetAlgoInfo` (enqueue.cc) per query.
//!
//! Floating-point types follow NCCL's (`float` tables, a few `double` caps) so that ties and the
//! printed `%.1f` values come out the same.

use crate::consts::*;
use crate::error::Result;
use crate::settings::{parse_list, TunerSettings};
use crate::shape::{CommShape, GraphShape, CPU_VENDOR_MIXED};
use crate::types::{DataType, RedOp};
use planner::Pattern;
use serde::Serialize;
use topo::consts::{cpu_arch, cpu_vendor};
use topo::{NcclVersion, PathType};

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

    /// `ncclTopoTuneModel`'s bandwidth and latency tables: for every function, algorithm and
    /// protocol NCCL models, [`Tuning::bus_bandwidth`] and [`Tuning::latency`] from the
    /// per-communicator facts [`Tuning::new`] gathers once; combinations NCCL does not model
    /// keep 0.
    fn tune(&mut self, st: &TunerSettings) {
        let pat_on = self.profile.has_pat && self.pat_enabled(st);
        let net_overhead = self.net_overhead(st);
        let t = Tuning::new(&self.shape, &self.profile, pat_on, net_overhead);
        let (mut bandwidths, mut latencies) = (self.bandwidths, self.latencies);
        for f in Func::ALL {
            let nsteps = f.ring_steps(t.n_ranks);
            for a in Algo::ALL {
                if !t.algo_modelled(f, a) {
                    continue;
                }
                let g = t.graphs[a as usize];
                for pr in Proto::ALL {
                    if !t.proto_modelled(a, pr) {
                        continue;
                    }
                    let Some(bus) = t.bus_bandwidth(f, a, pr, g, nsteps) else {
                        continue;
                    };
                    let (fi, ai, pi) = (f as usize, a as usize, pr as usize);
                    bandwidths[fi][ai][pi] = bus;
                    latencies[fi][ai][pi] = t.latency(f, a, pr, g, nsteps);
                }
            }
        }
        self.bandwidths = bandwidths;
        self.latencies = latencies;
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
                let mut time = self.algo_time(f, a, p, n_bytes, num_pipe_ops);
                if dtype.is_fp8() && a == Algo::Ring && s.n_ranks > 8 {
                    time *= 1024.0;
                }
                t[a as usize][p as usize] = time;
            }
        }
        t
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

    /// Every INFO line `ncclTopoTuneModel` prints at init, in NCCL's order, as communicator rank
    /// `rank` prints them (the `host:pid:tid [dev] NCCL INFO ` prefix left off; the enable
    /// matrix is one line with embedded newlines, as NCCL logs it): rejected thread counts,
    /// `NCCL_PROTO`/`NCCL_ALGO` echoes, the enable matrix (rank 0), the LL128-over-C2C note, the
    /// TUNING table (rank 0), the `NCCL_THREAD_THRESHOLDS` echo and `threadThresholds`. A
    /// one-rank communicator prints only the thread-count notes (NCCL returns early).
    pub fn init_lines(&self, st: &TunerSettings, rank: usize) -> Vec<String> {
        let mut out = Vec::new();
        // getNthreads: Ring Simple, Tree Simple and LL read NCCL_NTHREADS, LL128 its own.
        for _ in 0..3 {
            out.extend(nthreads_note(
                "NCCL_NTHREADS",
                st.nthreads,
                2 * WARP_SIZE,
                SIMPLE_MAX_NTHREADS,
            ));
        }
        out.extend(nthreads_note(
            "NCCL_LL128_NTHREADS",
            st.ll128_nthreads,
            LL128_MAX_NTHREADS / 4,
            LL128_MAX_NTHREADS,
        ));
        if self.shape.n_ranks <= 1 {
            return out;
        }
        out.extend(self.env_lines.iter().cloned());
        if rank == 0 {
            out.extend(self.enable_matrix(st));
        }
        if st.ll128_c2c.is_some_and(|v| v == 0) && self.shape.min_comp_cap >= 90 {
            // Printed for every function and algorithm whose LL128 is left at the default rule.
            let n = self
                .proto_enable
                .iter()
                .filter(|pe| pe[Proto::Ll128 as usize] == 2)
                .count()
                * self.n_algos();
            for _ in 0..n {
                out.push(
                    "Disabling LL128 over all PxN connections (PXB and C2C). This ensures that no \
                     C2C link will be used by LL128."
                        .to_string(),
                );
            }
        }
        if rank == 0 {
            out.extend(self.tuning_table());
        }
        if let Some(t) = &st.thread_thresholds {
            out.push(format!("NCCL_THREAD_THRESHOLDS set by environment to {t}"));
        }
        out.push(self.thread_thresholds_line());
        out
    }

    /// The INFO(TUNING) table rank 0 prints at init, one string per line, in NCCL's format
    /// (without the `host:pid:tid [rank] NCCL INFO ` prefix). Empty for a single rank, as in NCCL.
    pub fn tuning_table(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.shape.n_ranks <= 1 {
            return out;
        }
        let na = self.n_algos();
        for block in 0..na.div_ceil(3) {
            let algos: Vec<usize> = (block * 3..block * 3 + 3).filter(|&a| a < na).collect();
            let mut line = String::from("  Algorithm   |");
            for &a in &algos {
                line += &format!(" {:>14}   {:>14}   {:>14} |", "", Algo::ALL[a].name(), "");
            }
            out.push(line);
            // NCCL prints three protocol groups whatever the number of algorithms in the block.
            let mut line = String::from("  Protocol    |");
            for _ in 0..3 {
                for p in Proto::ALL {
                    line += &format!(" {:>14} |", p.name());
                }
            }
            out.push(line);
            let mut line = String::from(" Max NThreads |");
            for &a in &algos {
                for p in 0..N_PROTOS {
                    line += &format!(" {:>14} |", self.max_threads[a][p]);
                }
            }
            out.push(line);
            for f in Func::ALL {
                let mut line = format!("{:>13} |", f.name());
                for &a in &algos {
                    for p in 0..N_PROTOS {
                        line += &format!(
                            "{:>8.1}/{:>6.1} |",
                            self.latencies[f as usize][a][p], self.bandwidths[f as usize][a][p]
                        );
                    }
                }
                out.push(line);
            }
        }
        out
    }

    /// `threadThresholds %ld/%ld/%ld | %ld/%ld/%ld | %ld | %ld` (INFO INIT).
    pub fn thread_thresholds_line(&self) -> String {
        let t = &self.thread_thresholds;
        let (tr, rg) = (Algo::Tree as usize, Algo::Ring as usize);
        format!(
            "threadThresholds {}/{}/{} | {}/{}/{} | {} | {}",
            t[tr][0],
            t[tr][1],
            t[tr][2],
            t[rg][0],
            t[rg][1],
            t[rg][2],
            t[Algo::CollNetDirect as usize][2],
            t[Algo::CollNetChain as usize][2]
        )
    }

    /// `Enabled NCCL Func/Proto/Algo Matrix:` (INFO ENV), printed when NCCL_ALGO or NCCL_PROTO is
    /// set; the matrix NCCL prints is the user's lists before the always-off rules.
    pub fn enable_matrix(&self, st: &TunerSettings) -> Option<String> {
        if !self.user_lists {
            return None;
        }
        // Rebuild the user-only matrix (apply_enables has since switched more algorithms off).
        let mut pe = [[1, 2, 1]; N_FUNCS];
        let mut ae = [[1; N_ALGOS]; N_FUNCS];
        let prefixes = self.profile.func_prefixes;
        if let Some(p) = &st.proto {
            parse_list(
                "NCCL_PROTO",
                p,
                &crate::settings::proto_names(),
                prefixes,
                &mut pe,
            )
            .ok()?;
        }
        if let Some(a) = &st.algo {
            parse_list(
                "NCCL_ALGO",
                a,
                &crate::settings::algo_names(),
                prefixes,
                &mut ae,
            )
            .ok()?;
        }
        let na = self.n_algos();
        let mut s = String::from("Enabled NCCL Func/Proto/Algo Matrix:\n     Function | ");
        for p in Proto::ALL {
            s += &format!("{:>8}  ", p.name());
        }
        s += " | ";
        for a in &Algo::ALL[..na] {
            s += &format!("{:>13}  ", a.name());
        }
        s += "\n";
        for f in Func::ALL {
            s += &format!("{:>13} | ", f.name());
            for v in pe[f as usize] {
                s += &format!("{v:>8}  ");
            }
            s += " | ";
            for v in &ae[f as usize][..na] {
                s += &format!("{v:>13}  ");
            }
            s += "\n";
        }
        Some(s)
    }
}

/// What `ncclTopoTuneModel` computes once per communicator before its loops over functions,
/// algorithms and protocols.
struct Tuning<'a> {
    s: &'a CommShape,
    p: &'a Profile,
    n_nodes: usize,
    n_ranks: usize,
    /// Compute capability index of the tables (`compCapIndex`).
    cc: usize,
    /// `llMaxBws[index1][index2]`.
    ll_max_bw: f64,
    /// `perChMaxTreeBws[cc][index2]`.
    per_ch_max_tree_bw: f64,
    /// `perChMaxRingLL128Bws[cc][index2]`.
    per_ch_max_ring_ll128: f64,
    /// `perChMaxTreeLL128Bws[cc][index2]`.
    per_ch_max_tree_ll128: f64,
    /// `perChMaxNVLSTreeBws[cc][index2]` (2.28+).
    per_ch_max_nvls_tree: Option<f64>,
    /// `hwLat`, with POWER's PCI Tree Simple latency taken from Ring.
    hw_lat: [[[f32; 3]; 7]; 3],
    /// Ranks per node.
    ppn: f32,
    /// Each algorithm's graph.
    graphs: [&'a GraphShape; N_ALGOS],
    /// Each algorithm's intra-node hardware (NVLink when its graph is NVLink, else PCI).
    intra_hw: [usize; N_ALGOS],
    /// Each algorithm's hardware: intra-node within one node, NET across nodes.
    hw: [usize; N_ALGOS],
    /// PAT is available and enabled.
    pat_on: bool,
    /// NET overhead per step (µs).
    net_overhead: f32,
    /// The tree is a chain (`NCCL_TOPO_PATTERN_TREE`): Tree bandwidth takes 0.85.
    tree_pattern_is_chain: bool,
}

impl<'a> Tuning<'a> {
    /// The per-communicator facts of the tuning model.
    fn new(s: &'a CommShape, p: &'a Profile, pat_on: bool, net_overhead: f32) -> Tuning<'a> {
        let n_nodes = s.n_nodes;
        let n_ranks = s.n_ranks;
        let cc = compcap_index(s.min_comp_cap);
        let index2 = if n_nodes <= 2 { n_nodes - 1 } else { 2 };
        let index1 = if n_nodes == 1 {
            cc
        } else if s.cpu_vendor == cpu_vendor::AMD || s.cpu_vendor == CPU_VENDOR_MIXED {
            1
        } else {
            0
        };
        let ll_max_bw = p.ll_max_bw[index1][index2];
        let per_ch_max_tree_bw = p.per_ch_max_tree_bw[cc][index2];
        let per_ch_max_ring_ll128 = p.per_ch_max_ring_ll128_bw[cc][index2];
        let per_ch_max_tree_ll128 = p.per_ch_max_tree_ll128_bw[cc][index2];
        let per_ch_max_nvls_tree = p.per_ch_max_nvls_tree_bw.map(|t| t[cc][index2]);
        let mut hw_lat = p.hw_lat;
        if s.cpu_arch == cpu_arch::POWER {
            hw_lat[Hw::Pci as usize][Algo::Tree as usize][2] =
                hw_lat[Hw::Pci as usize][Algo::Ring as usize][2];
        }
        let ppn = n_ranks as f32 / n_nodes as f32;
        let graphs = s.graphs();
        let intra_hw: [usize; N_ALGOS] = std::array::from_fn(|a| {
            if graphs[a].type_intra == PathType::Nvl {
                Hw::NvLink as usize
            } else {
                Hw::Pci as usize
            }
        });
        let hw: [usize; N_ALGOS] = std::array::from_fn(|a| {
            if n_nodes == 1 {
                intra_hw[a]
            } else {
                Hw::Net as usize
            }
        });
        let tree_pattern_is_chain = if p.tree_pattern_from_comm {
            s.max_tree_pattern == Pattern::Tree
        } else {
            s.tree.pattern == Pattern::Tree
        };
        Tuning {
            s,
            p,
            n_nodes,
            n_ranks,
            cc,
            ll_max_bw,
            per_ch_max_tree_bw,
            per_ch_max_ring_ll128,
            per_ch_max_tree_ll128,
            per_ch_max_nvls_tree,
            hw_lat,
            ppn,
            graphs,
            intra_hw,
            hw,
            pat_on,
            net_overhead,
            tree_pattern_is_chain,
        }
    }

    /// Whether NCCL models algorithm `a` for function `f` (Broadcast and Reduce: Ring only;
    /// AllGather and ReduceScatter: PAT, Ring, NVLS, CollNet direct; no PAT AllReduce; no PAT
    /// before the release has it).
    fn algo_modelled(&self, f: Func, a: Algo) -> bool {
        !((a == Algo::Pat && !self.p.has_pat)
            || (matches!(f, Func::Broadcast | Func::Reduce) && a != Algo::Ring)
            || (matches!(f, Func::AllGather | Func::ReduceScatter)
                && !matches!(a, Algo::Pat | Algo::Ring | Algo::Nvls | Algo::CollNetDirect))
            || (f == Func::AllReduce && a == Algo::Pat))
    }

    /// Whether NCCL models protocol `pr` for algorithm `a` (NVLS and PAT: Simple only; PAT only
    /// when enabled).
    fn proto_modelled(&self, a: Algo, pr: Proto) -> bool {
        !((matches!(a, Algo::Nvls | Algo::NvlsTree) && pr != Proto::Simple)
            || (a == Algo::Pat && (pr != Proto::Simple || !self.pat_on)))
    }

    /// The bus bandwidth of (f, a, pr) over graph `g` (`bw * nChannels` with NCCL's
    /// per-algorithm and per-protocol factors and caps, converted to algorithm bandwidth where
    /// NCCL does); `None` where NCCL skips the combination (NVLS with fewer than 2 channels,
    /// 2.28+).
    fn bus_bandwidth(
        &self,
        f: Func,
        a: Algo,
        pr: Proto,
        g: &GraphShape,
        nsteps: usize,
    ) -> Option<f32> {
        let (s, p, cc, ppn) = (self.s, self.p, self.cc, self.ppn);
        let (n_nodes, n_ranks) = (self.n_nodes, self.n_ranks);
        let (ll_max_bw, per_ch_max_tree_bw) = (self.ll_max_bw, self.per_ch_max_tree_bw);
        let (per_ch_max_ring_ll128, per_ch_max_tree_ll128) =
            (self.per_ch_max_ring_ll128, self.per_ch_max_tree_ll128);
        let per_ch_max_nvls_tree = self.per_ch_max_nvls_tree;
        let tree_pattern_is_chain = self.tree_pattern_is_chain;
        let collnet = matches!(a, Algo::CollNetDirect | Algo::CollNetChain);
        let mut bw: f32 = if n_nodes <= 2 || collnet {
            g.bw_intra
        } else {
            g.bw_inter
        };
        if matches!(a, Algo::Nvls | Algo::NvlsTree) {
            match p.nvls_efficiency {
                Some(eff) => {
                    if g.n_channels < 2 {
                        return None;
                    }
                    let nch = g.n_channels as f32;
                    let mut intra = g.bw_intra * eff[cc] * (nch - 1.0) / nch;
                    if f == Func::AllReduce {
                        intra *= 2.0;
                    } else {
                        intra *= (ppn - 1.0) / ppn;
                    }
                    let inter = g.bw_inter
                        * if n_nodes <= 2 && a == Algo::NvlsTree {
                            2.0
                        } else {
                            1.0
                        };
                    let cap = if a == Algo::NvlsTree {
                        per_ch_max_nvls_tree.unwrap_or(f64::MAX) as f32
                    } else {
                        f32::MAX
                    };
                    bw = intra.min(inter).min(cap);
                }
                None => {
                    bw = if a == Algo::Nvls || n_nodes <= 2 {
                        g.bw_intra.min(g.bw_inter)
                    } else {
                        g.bw_intra.min(g.bw_inter / 2.0)
                    };
                }
            }
        }
        let mut bus: f32 = g.n_channels as f32 * bw;
        let nch = g.n_channels as f64;
        if a == Algo::Ring && pr == Proto::Ll {
            let factor = if p.ring_ll_half {
                0.5
            } else if n_nodes > 1 || matches!(f, Func::AllReduce | Func::Reduce) {
                0.25
            } else {
                1.0 / 3.0
            };
            bus = ll_max_bw.min(bus as f64 * factor) as f32;
        }
        if a == Algo::Ring && pr == Proto::Ll128 {
            let factor = if p.ring_ll128_ppn_penalty && ppn < 2.0 {
                0.7
            } else {
                0.92
            };
            bus = (bus as f64 * factor).min(nch * per_ch_max_ring_ll128) as f32;
        }
        if a == Algo::Tree && (f == Func::AllReduce || !p.tree_cap_allreduce_only) {
            bus = (bus as f64 * 0.92).min(nch * per_ch_max_tree_bw) as f32;
        }
        if a == Algo::Tree && pr == Proto::Ll {
            bus = (bus as f64 * 1.0 / 3.8).min(ll_max_bw) as f32;
        }
        if a == Algo::Tree && pr == Proto::Ll128 {
            let factor = if n_nodes == 1 {
                7.0 / 9.0
            } else {
                120.0 / 128.0
            };
            bus = (bus as f64 * factor).min(nch * per_ch_max_tree_ll128) as f32;
        }
        if a == Algo::Tree && tree_pattern_is_chain {
            bus *= 0.85;
        }
        if a == Algo::Pat {
            bus *= 0.75;
        }
        if collnet && pr != Proto::Simple {
            bus = 0.0;
        }
        if a == Algo::CollNetDirect && pr == Proto::Simple {
            if matches!(f, Func::AllGather | Func::ReduceScatter) {
                bus = ppn * g.bw_intra.min(g.bw_inter * 0.9);
            } else {
                let mut factor = ppn as f64 / g.n_channels.max(1) as f64;
                factor -= (factor - 1.0) / 2.0;
                bus = (bus as f64 / factor) as f32;
                if s.min_comp_cap >= 90 {
                    bus *= 0.85;
                }
            }
        }
        if matches!(a, Algo::Nvls | Algo::CollNetDirect)
            && pr == Proto::Simple
            && matches!(f, Func::AllGather | Func::ReduceScatter)
            && n_nodes > 1
        {
            // Needs a CollNet plugin with iallgather/ireducescatter and no more local
            // ranks than CollNet heads; we model no CollNet plugin.
            bus = 0.0;
        }
        let convert = if p.agrs_no_conversion {
            !(a != Algo::Ring && matches!(f, Func::AllGather | Func::ReduceScatter))
        } else {
            true
        };
        if convert {
            let ratio: f32 = if a == Algo::Ring
                || (p.nvls_efficiency.is_some() && matches!(a, Algo::Nvls | Algo::NvlsTree))
            {
                (n_ranks as f64 / nsteps as f64) as f32
            } else if matches!(a, Algo::Nvls | Algo::NvlsTree) {
                5.0 / 6.0
            } else {
                0.5
            };
            bus *= ratio;
        }
        Some(bus)
    }

    /// The latency of (f, a, pr) over graph `g` (µs): the base latency plus NCCL's intra- and
    /// inter-node step latencies for the algorithm's shape.
    fn latency(&self, f: Func, a: Algo, pr: Proto, g: &GraphShape, nsteps: usize) -> f32 {
        let (p, hw_lat, hw, ppn) = (self.p, &self.hw_lat, &self.hw, self.ppn);
        let (n_nodes, n_ranks, net_overhead) = (self.n_nodes, self.n_ranks, self.net_overhead);
        let intra_hw = &self.intra_hw;
        let (ai, pi) = (a as usize, pr as usize);
        let mut lat = p.base_lat[ai][pi];
        let mut intra_lat = hw_lat[intra_hw[ai]][ai][pi];
        let mut inter_lat = if ppn == 1.0 && p.ppn1_tree_net_lat {
            hw_lat[Hw::Net as usize][Algo::Tree as usize][pi]
        } else {
            hw_lat[Hw::Net as usize][ai][pi]
        };
        inter_lat += g.latency_inter;
        if pr == Proto::Simple {
            inter_lat += g.latency_inter;
        }
        let log_nodes = log2i(n_nodes as u64) as f32;
        let lr = (n_ranks / n_nodes) as f32;
        match a {
            Algo::Ring => {
                let mut l = hw_lat[hw[ai]][ai][pi];
                if matches!(f, Func::Reduce | Func::Broadcast) {
                    if g.same_channels {
                        lat += l;
                    } else {
                        if pr == Proto::Simple {
                            l = hw_lat[hw[ai]][Algo::Tree as usize][pi];
                        }
                        lat += nsteps as f32 * l;
                    }
                } else {
                    let mut ovh = 0.0;
                    if n_nodes > 1 {
                        ovh = net_overhead;
                        if pr == Proto::Simple {
                            ovh *= 3.0;
                        }
                    }
                    intra_lat = intra_lat.max(ovh);
                    let inter_steps = if p.inter_steps_fixed {
                        if n_nodes == 1 {
                            0
                        } else if f == Func::AllReduce {
                            2 * (n_nodes - 1)
                        } else {
                            n_nodes - 1
                        }
                    } else if f == Func::AllReduce {
                        if n_nodes > 1 {
                            2 * n_nodes
                        } else {
                            0
                        }
                    } else {
                        n_nodes - 1
                    };
                    lat += (nsteps as f32 - inter_steps as f32) * intra_lat
                        + inter_steps as f32 * inter_lat;
                }
            }
            Algo::Tree => {
                if f == Func::AllReduce {
                    lat += 2.0 * ((lr - 1.0) * intra_lat + log_nodes * inter_lat);
                }
            }
            Algo::CollNetDirect => {
                lat += 2.0 * ((lr - 1.0).min(1.0) * intra_lat + (lr - 1.0) * 0.4) + inter_lat;
            }
            Algo::CollNetChain => {
                lat += 2.0 * (lr - 1.0) * intra_lat + inter_lat;
            }
            Algo::Nvls => {
                lat = intra_lat;
                if n_nodes > 1 {
                    lat += inter_lat;
                }
            }
            Algo::NvlsTree => {
                lat += intra_lat + 2.0 * log_nodes * inter_lat;
            }
            Algo::Pat => {
                if matches!(f, Func::AllGather | Func::ReduceScatter) {
                    lat += log_nodes * (inter_lat / 3.5) + n_ranks as f32 * 2.8;
                }
            }
        }
        lat
    }
}
