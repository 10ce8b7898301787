//! The job's rank layout and which of its ranks run as processes.
//!
//! A [`Mesh`] names the dimensions of the job's ranks, row major with the last dimension
//! fastest (`dp=16,local=8`: rank = dp * 8 + local), as torch's `DeviceMesh` and Megatron lay
//! ranks out. A [`Fold`] over some of its dimensions makes every rank whose coordinate in a
//! folded dimension is not 0 *virtual*: it is not started, and it does what its
//! *representative* does, the rank with the same coordinates and 0 in every folded dimension.
//! Training programs are SPMD, so ranks that differ only in a data-parallel coordinate run the
//! same program on data of the same shape; with uniform data across replicas (torch's
//! `FakeProcessGroup` calls this contract `simulate_uniform_ranks`) they hold the same values.

use std::fmt;

/// Named dimensions of the job's ranks, row major, last fastest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mesh {
    dims: Vec<(String, usize)>,
}

/// The most ranks a mesh may have.
pub const MAX_RANKS: usize = 1 << 24;

impl Mesh {
    /// A mesh of these dimensions (each at least 1, names distinct, at most [`MAX_RANKS`]).
    pub fn new(dims: Vec<(String, usize)>) -> Result<Mesh, String> {
        if dims.is_empty() {
            return Err("a mesh needs at least one dimension".into());
        }
        let mut size: usize = 1;
        for (i, (name, n)) in dims.iter().enumerate() {
            let ok_name = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !ok_name {
                return Err(format!(
                    "dimension name {name:?}: use letters, digits, '_' or '-'"
                ));
            }
            if dims[..i].iter().any(|(m, _)| m == name) {
                return Err(format!("dimension {name} is named twice"));
            }
            if *n == 0 {
                return Err(format!("dimension {name} has size 0"));
            }
            size = size
                .checked_mul(*n)
                .filter(|&s| s <= MAX_RANKS)
                .ok_or_else(|| format!("more than {MAX_RANKS} ranks"))?;
        }
        Ok(Mesh { dims })
    }

    /// Parses `NAME=SIZE,NAME=SIZE,...`.
    pub fn parse(text: &str) -> Result<Mesh, String> {
        let dims = text
            .split(',')
            .map(|part| {
                let (name, size) = part
                    .split_once('=')
                    .ok_or_else(|| format!("{part:?} is not NAME=SIZE"))?;
                let size = size
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| format!("{part:?}: the size is not a whole number"))?;
                Ok((name.trim().to_string(), size))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Mesh::new(dims)
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[(String, usize)] {
        &self.dims
    }

    /// The number of ranks (the product of the sizes).
    pub fn size(&self) -> usize {
        self.dims.iter().map(|d| d.1).product()
    }

    /// The index of the dimension called `name`.
    pub fn dim(&self, name: &str) -> Option<usize> {
        self.dims.iter().position(|d| d.0 == name)
    }

    /// The coordinates of `rank` (`rank < size()`).
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        let mut c = vec![0; self.dims.len()];
        let mut r = rank;
        for (i, (_, n)) in self.dims.iter().enumerate().rev() {
            c[i] = r % n;
            r /= n;
        }
        c
    }

    /// The rank at `coords`.
    pub fn rank(&self, coords: &[usize]) -> usize {
        self.dims
            .iter()
            .zip(coords)
            .fold(0, |r, ((_, n), c)| r * n + c)
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, n)) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={n}")?;
        }
        Ok(())
    }
}

/// A mesh with some dimensions folded: the ranks with 0 in every folded dimension run, the
/// others are virtual copies of their representative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fold {
    mesh: Mesh,
    folded: Vec<usize>,
}

impl Fold {
    /// Folds the dimensions named `names` of `mesh` (each named once, each in the mesh).
    pub fn new(mesh: Mesh, names: &[&str]) -> Result<Fold, String> {
        let mut folded = Vec::new();
        for name in names {
            let d = mesh
                .dim(name)
                .ok_or_else(|| format!("--fold {name}: the mesh {mesh} has no dimension {name}"))?;
            if folded.contains(&d) {
                return Err(format!("--fold {name} is given twice"));
            }
            folded.push(d);
        }
        folded.sort_unstable();
        Ok(Fold { mesh, folded })
    }

    /// Parses a comma-separated list of dimension names of `mesh`.
    pub fn parse(mesh: Mesh, text: &str) -> Result<Fold, String> {
        let names: Vec<&str> = text.split(',').map(str::trim).collect();
        Fold::new(mesh, &names)
    }

    /// The job's layout.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The folded dimensions' names, outermost first.
    pub fn folded_names(&self) -> Vec<&str> {
        self.folded
            .iter()
            .map(|&d| self.mesh.dims[d].0.as_str())
            .collect()
    }

    /// The job's rank count.
    pub fn ranks(&self) -> usize {
        self.mesh.size()
    }

    /// Whether `rank` runs as a process.
    pub fn is_real(&self, rank: usize) -> bool {
        let c = self.mesh.coords(rank);
        self.folded.iter().all(|&d| c[d] == 0)
    }

    /// The rank whose work `rank` does: itself when real.
    pub fn representative(&self, rank: usize) -> usize {
        let mut c = self.mesh.coords(rank);
        for &d in &self.folded {
            c[d] = 0;
        }
        self.mesh.rank(&c)
    }

    /// The ranks that run, ascending.
    pub fn real_ranks(&self) -> Vec<usize> {
        (0..self.ranks()).filter(|&r| self.is_real(r)).collect()
    }

    /// How many ranks each real rank stands for (itself included).
    pub fn multiplicity(&self) -> usize {
        self.folded.iter().map(|&d| self.mesh.dims[d].1).product()
    }
}

impl fmt::Display for Fold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.folded_names().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_row_major_last_fastest() {
        let m = Mesh::parse("pp=2,dp=3,tp=4").unwrap();
        assert_eq!(m.size(), 24);
        assert_eq!(m.coords(0), vec![0, 0, 0]);
        assert_eq!(m.coords(5), vec![0, 1, 1]);
        assert_eq!(m.coords(23), vec![1, 2, 3]);
        for r in 0..24 {
            assert_eq!(m.rank(&m.coords(r)), r);
        }
        assert_eq!(m.to_string(), "pp=2,dp=3,tp=4");
    }

    #[test]
    fn folding_dp_keeps_the_first_replica_of_every_other_coordinate() {
        // torchtitan's pp, dp, tp layout: 8 x 8 x 8 ranks, dp folded, 64 real.
        let f = Fold::parse(Mesh::parse("pp=8,dp=8,tp=8").unwrap(), "dp").unwrap();
        let real = f.real_ranks();
        assert_eq!(real.len(), 64);
        assert_eq!(&real[..9], &[0, 1, 2, 3, 4, 5, 6, 7, 64]);
        assert_eq!(f.representative(8 + 3), 3);
        assert_eq!(f.representative(64 * 5 + 8 * 7 + 2), 64 * 5 + 2);
        assert_eq!(f.multiplicity(), 8);
        for r in 0..f.ranks() {
            let p = f.representative(r);
            assert!(f.is_real(p));
            assert_eq!(f.is_real(r), p == r);
        }
    }

    #[test]
    fn bad_layouts_are_named() {
        assert!(Mesh::parse("dp=0").unwrap_err().contains("size 0"));
        assert!(Mesh::parse("dp=2,dp=3").unwrap_err().contains("twice"));
        assert!(Mesh::parse("dp").unwrap_err().contains("NAME=SIZE"));
        assert!(Mesh::parse("dp=x").unwrap_err().contains("whole number"));
        assert!(Mesh::parse("a=65536,b=65536")
            .unwrap_err()
            .contains("more than"));
        let m = Mesh::parse("dp=2,local=8").unwrap();
        let e = Fold::parse(m.clone(), "tp").unwrap_err();
        assert!(e.contains("no dimension tp"), "{e}");
        assert!(Fold::parse(m, "dp,dp").unwrap_err().contains("twice"));
    }
}
