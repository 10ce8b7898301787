//! NVLS support (NCCL 2.30.7 `src/transport/nvls.cc`, `ncclNvlsInit`).

use crate::settings::PlannerSettings;
use topo::{NodeKind, System};

/// `ncclNvlsInit`: NVLS multicast is what an HGX/DGX with NVSwitches and Fabric Manager reports
/// for sm90+ GPUs; `NCCL_NVLS_ENABLE=1` forces it, 0 disables it.
pub(super) fn nvls_supported(sys: &System, settings: &PlannerSettings, ngpus: usize) -> bool {
    if settings.nvls_enable == 0 || ngpus < 2 {
        return false;
    }
    if settings.nvls_enable == 2 {
        let sm = sys.comp_cap().map(|c| c.0).unwrap_or(0);
        return sm >= 90 && sys.count(NodeKind::Nvs) > 0;
    }
    true
}
