//! The kernel registry: names registered by `__cudaRegisterFunction` and launch counts.
//!
//! Kernels do not run on the fake device; launches are counted by name so reports can show
//! what a program would have executed.

use std::collections::{BTreeMap, HashMap};

/// Registered kernels and how often each was launched.
#[derive(Debug, Default)]
pub struct Kernels {
    names: HashMap<usize, String>,
    launches: BTreeMap<String, u64>,
}

impl Kernels {
    /// Remembers that host stub `host_fun` launches the device function `name`.
    pub fn register(&mut self, host_fun: usize, name: &str) {
        self.names.insert(host_fun, name.to_string());
    }

    /// The registered name of a host stub, or a made-up one naming its address.
    pub fn name_of(&self, host_fun: usize) -> String {
        self.names
            .get(&host_fun)
            .cloned()
            .unwrap_or_else(|| format!("<unregistered kernel at {host_fun:#x}>"))
    }

    /// Counts one launch; returns the kernel's name.
    pub fn launch(&mut self, host_fun: usize) -> String {
        let name = self.name_of(host_fun);
        *self.launches.entry(name.clone()).or_default() += 1;
        name
    }

    /// Counts one launch of work known by name (compute priced by the compute model).
    pub fn launch_named(&mut self, name: &str) {
        match self.launches.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                self.launches.insert(name.to_string(), 1);
            }
        }
    }

    /// Launch counts by kernel name, sorted by name.
    pub fn launch_counts(&self) -> &BTreeMap<String, u64> {
        &self.launches
    }

    /// Number of registered kernels.
    pub fn registered(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_name() {
        let mut k = Kernels::default();
        k.register(0x1000, "_Z6vecAddPfS_S_i");
        assert_eq!(k.launch(0x1000), "_Z6vecAddPfS_S_i");
        k.launch(0x1000);
        let unknown = k.launch(0x2000);
        assert!(unknown.contains("0x2000"));
        assert_eq!(k.launch_counts()["_Z6vecAddPfS_S_i"], 2);
        assert_eq!(k.registered(), 1);
    }
}
