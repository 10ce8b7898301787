//! Multi-node NVLink (MNNVL) for one communicator: which ranks turn it on and which ranks fuse
//! their topologies (NCCL 2.30.7 `src/init.cc` `initTransportsRank` and `src/mnnvl.cc`
//! `ncclMnnvlCheck`).
//!
//! NCCL's rules, in order:
//! - The check runs when the communicator spans hosts, `NCCL_MNNVL_ENABLE` is not 0 and P2P is
//!   not disabled (`NCCL_P2P_DISABLE=1` / `NCCL_P2P_LEVEL=LOC`), or always with
//!   `NCCL_MNNVL_ENABLE=1`.
//! - Every rank's GPU must report fabric state COMPLETED and a non-zero cluster UUID, else MNNVL
//!   stays off for everyone.
//! - A rank's clique is the ranks with its cluster UUID and clique id (in rank order, its
//!   `cliqueRank` the position in that list); its NVLink domain size counts the ranks with its
//!   cluster UUID. MNNVL is on for the rank when either holds more than itself.
//! - A rank with MNNVL on fuses its topology across its clique (`ncclTopoGetSystem`); the others
//!   fuse across their host, as without MNNVL.
//!
//! What NCCL needs from the driver for this (cuMem, FABRIC handles, IMEX) is taken as present on
//! hosts that report fabric information.

use super::Member;
use crate::settings::PlannerSettings;
use topo::settings::MnnvlEnable;
use topo::{Cluster, FabricInfo, PathType};

/// What a rank with MNNVL on prints (`MNNVL %d cliqueId %x cliqueSize %d cliqueRank %d
/// nvlDomainSize %d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MnnvlRank {
    /// The clique id.
    pub clique_id: u32,
    /// Ranks in the clique.
    pub clique_size: usize,
    /// This rank's place in its clique.
    pub clique_rank: usize,
    /// Ranks in the NVLink domain (same cluster UUID).
    pub nvl_domain_size: usize,
    /// `comm->p2pCrossClique`: CUDA P2P to the domain's other cliques (`NCCL_MNNVL_CROSS_CLIQUE`
    /// and more ranks in the domain than in the clique).
    pub cross_clique: bool,
}

/// The fabric information NCCL ends up with for each member (`None`: the GPU reports none),
/// after `NCCL_MNNVL_UUID` / `NCCL_MNNVL_CLIQUE_ID`.
pub(super) fn fabric_of(
    cluster: &Cluster,
    members: &[Member],
    settings: &PlannerSettings,
) -> Vec<Option<FabricInfo>> {
    members
        .iter()
        .map(|m| {
            cluster.nodes[m.host]
                .fabric
                .map(|f| f.with_overrides(&settings.topo.mnnvl))
        })
        .collect()
}

/// Each member's MNNVL state (`None`: off for that rank) and, for ranks with it on, their
/// clique (rank numbers in order).
pub(super) fn mnnvl_ranks(
    members: &[Member],
    fabric: &[Option<FabricInfo>],
    settings: &PlannerSettings,
) -> Vec<Option<(MnnvlRank, Vec<usize>)>> {
    let none = || vec![None; members.len()];
    let spans_hosts = members.iter().any(|m| m.host != members[0].host);
    let p2p_off = settings.topo.p2p_level == Some(PathType::Loc);
    let check = match settings.topo.mnnvl.enable {
        MnnvlEnable::Off => false,
        MnnvlEnable::On => true,
        MnnvlEnable::Auto => spans_hosts && !p2p_off,
    };
    if !check {
        return none();
    }
    let Some(all) = fabric.iter().copied().collect::<Option<Vec<FabricInfo>>>() else {
        return none();
    };
    if all
        .iter()
        .any(|f| f.state != topo::mnnvl::FABRIC_STATE_COMPLETED || f.uuid_is_zero())
    {
        return none();
    }
    // Ranks grouped by (UUID, clique id) and by UUID, in rank order.
    let mut cliques: rustc_hash::FxHashMap<([u64; 2], u32), Vec<usize>> = Default::default();
    let mut domains: rustc_hash::FxHashMap<[u64; 2], usize> = Default::default();
    for (r, f) in all.iter().enumerate() {
        cliques
            .entry((f.cluster_uuid, f.clique_id))
            .or_default()
            .push(r);
        *domains.entry(f.cluster_uuid).or_default() += 1;
    }
    all.iter()
        .enumerate()
        .map(|(r, f)| {
            let clique = &cliques[&(f.cluster_uuid, f.clique_id)];
            let domain = domains[&f.cluster_uuid];
            if clique.len() <= 1 && domain <= 1 {
                return None;
            }
            let info = MnnvlRank {
                clique_id: f.clique_id,
                clique_size: clique.len(),
                clique_rank: clique.iter().position(|&x| x == r).unwrap_or(0),
                nvl_domain_size: domain,
                cross_clique: settings.topo.mnnvl.cross_clique && domain > clique.len(),
            };
            Some((info, clique.clone()))
        })
        .collect()
}

/// The groups of ranks that search one topology together (NCCL's fusion sets): a rank with
/// MNNVL on searches with its clique, the others with the ranks of their host. Returns each
/// rank's group and the groups' ranks, groups in order of their first rank.
pub(super) fn fusion_groups(
    members: &[Member],
    mnnvl: &[Option<(MnnvlRank, Vec<usize>)>],
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut group_of = vec![usize::MAX; members.len()];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_host: rustc_hash::FxHashMap<usize, usize> = Default::default();
    for r in 0..members.len() {
        if group_of[r] != usize::MAX {
            continue;
        }
        let g = groups.len();
        match &mnnvl[r] {
            Some((_, clique)) => {
                for &x in clique {
                    group_of[x] = g;
                }
                groups.push(clique.clone());
            }
            None => match by_host.get(&members[r].host) {
                Some(&g) => {
                    group_of[r] = g;
                    groups[g].push(r);
                }
                None => {
                    by_host.insert(members[r].host, g);
                    group_of[r] = g;
                    groups.push(vec![r]);
                }
            },
        }
    }
    (group_of, groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(hosts: usize, per: i32) -> Vec<Member> {
        (0..hosts)
            .flat_map(|h| (0..per).map(move |dev| Member { host: h, dev }))
            .collect()
    }

    #[test]
    fn cliques_follow_uuid_and_clique_id() {
        let m = members(4, 2);
        // Hosts 0-1 in domain 0, hosts 2-3 in domain 1: two cliques of 4.
        let fabric: Vec<_> = m
            .iter()
            .map(|x| Some(FabricInfo::of_domain(x.host / 2)))
            .collect();
        let s = PlannerSettings::default();
        let r = mnnvl_ranks(&m, &fabric, &s);
        let (info, clique) = r[5].clone().unwrap();
        assert_eq!(clique, [4, 5, 6, 7]);
        assert_eq!(
            (info.clique_size, info.clique_rank, info.nvl_domain_size),
            (4, 1, 4)
        );
        let (of, groups) = fusion_groups(&m, &r);
        assert_eq!(of, [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(groups.len(), 2);
        // One rank without fabric information turns MNNVL off for all.
        let mut partial = fabric.clone();
        partial[3] = None;
        assert!(mnnvl_ranks(&m, &partial, &s).iter().all(Option::is_none));
        // NCCL_MNNVL_ENABLE=0, or P2P disabled under the automatic mode.
        let mut off = PlannerSettings::default();
        off.topo.mnnvl.enable = MnnvlEnable::Off;
        assert!(mnnvl_ranks(&m, &fabric, &off).iter().all(Option::is_none));
        let mut nop2p = PlannerSettings::default();
        nop2p.topo.p2p_level = Some(PathType::Loc);
        assert!(mnnvl_ranks(&m, &fabric, &nop2p).iter().all(Option::is_none));
        // One host: the automatic mode does not check; NCCL_MNNVL_ENABLE=1 does.
        let one = members(1, 4);
        let f1 = vec![Some(FabricInfo::of_domain(0)); 4];
        assert!(mnnvl_ranks(&one, &f1, &s).iter().all(Option::is_none));
        let mut on = PlannerSettings::default();
        on.topo.mnnvl.enable = MnnvlEnable::On;
        assert!(mnnvl_ranks(&one, &f1, &on).iter().all(Option::is_some));
        // Without MNNVL, the groups are the hosts.
        let (of, _) = fusion_groups(&m, &vec![None; 8]);
        assert_eq!(of, [0, 0, 1, 1, 2, 2, 3, 3]);
    }
}
