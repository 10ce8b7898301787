//! The INFO lines `ncclTopoTuneModel` prints at init: thread-count notes, `NCCL_PROTO`/`NCCL_ALGO`
//! echoes, the enable matrix, the TUNING table and the thread thresholds.

use super::*;

impl NcclModel {
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
