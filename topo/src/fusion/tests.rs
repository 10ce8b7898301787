//! Tests of NIC fusion against NCCL's rules.

use super::*;
use crate::settings::{parse_merge_level, TopoSettings};

const CPU: &str =
    r#"<cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">"#;

fn port(name: &str, dev: i32, port: i32, extra: &str) -> String {
    format!(
        r#"<net name="{name}" dev="{dev}" speed="200000" port="{port}" latency="0.000000" guid="0x{:x}" maxconn="131072" gdr="1"{extra}/>"#,
        0x100 + dev
    )
}
fn nic_pci(busid: &str, nets: &str) -> String {
    format!(
        r#"<pci busid="{busid}" class="0x020000" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16"><nic>{nets}</nic></pci>"#
    )
}
fn switch(busid: &str, inner: &str) -> String {
    format!(
        r#"<pci busid="{busid}" class="0x060400" vendor="0x1000" device="0xc030" link_speed="32.0 GT/s PCIe" link_width="16">{inner}</pci>"#
    )
}
fn system(cpus: &[String]) -> XmlElement {
    let text = format!(r#"<system version="1">{}</system>"#, cpus.concat());
    crate::xml::parse(&text, "t.xml").unwrap()
}
fn cpu(inner: &str) -> String {
    format!("{CPU}{inner}</cpu>")
}
/// Two dual-port NICs under one switch: (mlx5_0, mlx5_1) on 0000:0c:00.0, (mlx5_2, mlx5_3)
/// on 0000:0d:00.0.
fn two_dual_port_nics(extra: [&str; 4]) -> XmlElement {
    system(&[cpu(&switch(
        "0000:0a:00.0",
        &format!(
            "{}{}",
            nic_pci(
                "0000:0c:00.0",
                &(port("mlx5_0", 0, 1, extra[0]) + &port("mlx5_1", 1, 2, extra[1]))
            ),
            nic_pci(
                "0000:0d:00.0",
                &(port("mlx5_2", 2, 1, extra[2]) + &port("mlx5_3", 3, 2, extra[3]))
            )
        ),
    ))])
}
fn nets(x: &XmlElement) -> Vec<(String, String)> {
    let mut out = Vec::new();
    x.walk(&mut |e, _| {
        if e.name == "net" {
            out.push((
                e.get("name").unwrap().to_string(),
                e.get("dev").unwrap_or("-").to_string(),
            ));
        }
    });
    out
}
fn fuse(x: &XmlElement, f: &NicFusion) -> Result<Option<(XmlElement, Vec<VNic>)>> {
    fuse_nics(x, "t.xml", f, NcclVersion::DEFAULT)
}
fn names(v: &[VNic]) -> Vec<&str> {
    v.iter().map(|n| n.name.as_str()).collect()
}

#[test]
fn default_port_level_fuses_the_ports_of_each_nic() {
    let x = two_dual_port_nics(["", "", "", ""]);
    let (out, vn) = fuse(&x, &NicFusion::default()).unwrap().unwrap();
    assert_eq!(names(&vn), ["mlx5_0+mlx5_1", "mlx5_2+mlx5_3"]);
    assert_eq!(vn[0].ports, [0, 1]);
    assert_eq!(vn[0].speed, 400000);
    // Numbered after the 4 physical ports; plane = virtual bit | bit of plane index 0.
    assert_eq!((vn[0].dev, vn[1].dev), (4, 5));
    assert_eq!(vn[0].plane, 0x4001);
    assert_eq!(vn[0].rail, -1);
    // The fused net replaces the ports inside the same <nic>, which keeps its PCI device.
    assert_eq!(
        nets(&out),
        [
            ("mlx5_0+mlx5_1".to_string(), "4".to_string()),
            ("mlx5_2+mlx5_3".to_string(), "5".to_string())
        ]
    );
    let sw = &out.children[0].children[0];
    assert_eq!(sw.children.len(), 2, "no PCI device added");
    let net = &sw.children[0].children[0].children[0];
    assert_eq!(net.get("speed"), Some("400000"));
    assert_eq!(net.get("port"), Some("1"));
    assert_eq!(net.get("guid"), Some("0x100"));
    assert_eq!(net.get("plane"), Some("16385"));
    assert_eq!(net.get("rail"), None);
}

#[test]
fn loc_level_and_older_releases_fuse_nothing() {
    let x = two_dual_port_nics(["", "", "", ""]);
    let loc = NicFusion {
        merge_level: PathType::Loc,
        ..NicFusion::default()
    };
    assert!(fuse(&x, &loc).unwrap().is_none());
    assert!(fuse_nics(
        &x,
        "t.xml",
        &NicFusion::default(),
        NcclVersion::new(2, 29, 7)
    )
    .unwrap()
    .is_none());
    let no_ib = NicFusion {
        ib_merge_nics: false,
        ..NicFusion::default()
    };
    assert!(fuse(&x, &no_ib).unwrap().is_none());
}

#[test]
fn pix_level_fuses_nics_under_one_switch_with_summed_width() {
    let x = two_dual_port_nics(["", "", "", ""]);
    let pix = NicFusion {
        merge_level: PathType::Pix,
        ..NicFusion::default()
    };
    let (out, vn) = fuse(&x, &pix).unwrap().unwrap();
    assert_eq!(names(&vn), ["mlx5_0+mlx5_1+mlx5_2+mlx5_3"]);
    assert_eq!(vn[0].speed, 800000);
    // Common parent is the switch (a bridge): a new PCI device under it, copied from the first
    // port's NIC with the next free bus id, and the widths set to the sum (2 x16).
    let sw = &out.children[0].children[0];
    assert_eq!(sw.get("link_width"), Some("32"));
    assert_eq!(sw.children.len(), 3);
    let new = &sw.children[2];
    assert_eq!(new.get("busid"), Some("0000:0c:00.1"));
    assert_eq!(new.get("class"), Some("0x020000"));
    assert_eq!(new.get("link_width"), Some("32"));
    assert_eq!(new.attrs[0].0, "busid");
    assert_eq!(
        nets(&out),
        [("mlx5_0+mlx5_1+mlx5_2+mlx5_3".into(), "4".into())]
    );
    // PXB does not reach two NICs directly under one switch as PIX; widths only from 2.28.
    let x2 = system(&[cpu(&switch(
        "0000:0a:00.0",
        &(nic_pci("0000:0c:00.0", &port("a", 0, 1, ""))
            + &switch(
                "0000:0b:00.0",
                &nic_pci("0000:0d:00.0", &port("b", 1, 1, "")),
            )),
    ))]);
    assert!(fuse(&x2, &pix).unwrap().is_none());
    let pxb = NicFusion {
        merge_level: PathType::Pxb,
        ..NicFusion::default()
    };
    let (_, vn) = fuse(&x2, &pxb).unwrap().unwrap();
    assert_eq!(names(&vn), ["a+b"]);
}

#[test]
fn pci_functions_of_one_device_are_ports() {
    // A dual-port NIC exposed as two PCI functions, each with its own <nic>.
    let x = system(&[cpu(&switch(
        "0000:0a:00.0",
        &(nic_pci("0000:0c:00.0", &port("a", 0, 1, ""))
            + &nic_pci("0000:0c:00.1", &port("b", 1, 1, ""))
            + &nic_pci("0000:0d:00.0", &port("c", 2, 1, ""))),
    ))]);
    let (out, vn) = fuse(&x, &NicFusion::default()).unwrap().unwrap();
    assert_eq!(names(&vn), ["a+b"]);
    // Parent: the switch, so a new function after the taken 0c:00.1; at PORT level widths stay.
    let sw = &out.children[0].children[0];
    assert_eq!(sw.get("link_width"), Some("16"));
    let new = sw.children.last().unwrap();
    assert_eq!(new.get("busid"), Some("0000:0c:00.2"));
    assert_eq!(new.get("link_width"), Some("16"));
    assert_eq!(
        nets(&out),
        [("c".into(), "2".into()), ("a+b".into(), "3".into())]
    );
}

#[test]
fn nics_on_two_cpus_cannot_be_fused_at_sys_level() {
    let x = system(&[
        cpu(&nic_pci("0000:0c:00.0", &port("a", 0, 1, ""))),
        r#"<cpu numaid="1" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">"#
            .to_string()
            + &nic_pci("0000:8c:00.0", &port("b", 1, 1, ""))
            + "</cpu>",
    ]);
    let sys = NicFusion {
        merge_level: PathType::Sys,
        ..NicFusion::default()
    };
    let err = fuse(&x, &sys).unwrap_err().to_string();
    assert!(err.contains("NUMA"), "{err}");
    let phb = NicFusion {
        merge_level: PathType::Phb,
        ..NicFusion::default()
    };
    assert!(fuse(&x, &phb).unwrap().is_none());
}

#[test]
fn force_merge_goes_first_and_must_match_exactly() {
    let x = two_dual_port_nics(["", "", "", ""]);
    let force = |s: &str| NicFusion {
        force_merge: Some(s.to_string()),
        ..NicFusion::default()
    };
    // Forced across NICs; the two ports left over are then fused automatically (one NIC each,
    // so at PORT level they stay alone).
    let (out, vn) = fuse(&x, &force("mlx5_1,mlx5_2")).unwrap().unwrap();
    assert_eq!(names(&vn), ["mlx5_1+mlx5_2"]);
    assert_eq!(
        nets(&out),
        [
            ("mlx5_0".into(), "0".into()),
            ("mlx5_3".into(), "3".into()),
            ("mlx5_1+mlx5_2".into(), "4".into())
        ]
    );
    // Two groups, a port filter, a one-port group (placed, not made).
    let (_, vn) = fuse(&x, &force("mlx5_0:1,mlx5_3;mlx5_1")).unwrap().unwrap();
    assert_eq!(names(&vn), ["mlx5_0+mlx5_3"]);
    // A forced one-port group keeps that port out of the automatic pass.
    let (_, vn) = fuse(&x, &force("mlx5_1")).unwrap().unwrap();
    assert_eq!(names(&vn), ["mlx5_2+mlx5_3"]);
    for bad in ["mlx5_0,mlx5_9", "mlx5_0:2,mlx5_1", ":1"] {
        let e = fuse(&x, &force(bad)).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET_FORCE_MERGE"), "{bad}: {e}");
        // The error names the host file and the <net> elements it was matched against.
        assert!(
            e.contains("the <net> elements of t.xml are mlx5_0, mlx5_1, mlx5_2, mlx5_3"),
            "{bad}: {e}"
        );
    }
    let no_ib = NicFusion {
        ib_merge_nics: false,
        ..force("mlx5_0,mlx5_1")
    };
    assert!(fuse(&x, &no_ib).is_err());
}

#[test]
fn rail_policy_fuses_only_ports_of_one_defined_rail() {
    let x = two_dual_port_nics([r#" rail="0""#, r#" rail="1""#, r#" rail="1""#, ""]);
    let pix = |policy| NicFusion {
        merge_level: PathType::Pix,
        merge_policy: policy,
        ..NicFusion::default()
    };
    let (_, vn) = fuse(&x, &pix(NetMergePolicy::Rail)).unwrap().unwrap();
    assert_eq!(names(&vn), ["mlx5_1+mlx5_2"]);
    assert_eq!(vn[0].rail, 1);
    // ALL ignores rails (and the fused device has no rail when they differ); 2.30.4 has no
    // policy at all.
    let (_, vn) = fuse(&x, &pix(NetMergePolicy::All)).unwrap().unwrap();
    assert_eq!(names(&vn), ["mlx5_0+mlx5_1+mlx5_2+mlx5_3"]);
    assert_eq!(vn[0].rail, -1);
    let (_, vn) = fuse_nics(
        &x,
        "t.xml",
        &pix(NetMergePolicy::Rail),
        NcclVersion::new(2, 30, 4),
    )
    .unwrap()
    .unwrap();
    assert_eq!(vn[0].ports.len(), 4);
}

#[test]
fn planes_and_group_size() {
    // Plane ids index in port order (undefined = 0): planes 7, 9 -> indices 1, 2.
    let x = two_dual_port_nics([r#" plane="7""#, r#" plane="9""#, "", r#" plane="7""#]);
    let (_, vn) = fuse(&x, &NicFusion::default()).unwrap().unwrap();
    assert_eq!(vn[0].plane, 0x4000 | 0b110);
    assert_eq!(vn[1].plane, 0x4000 | 0b011);
    // Ten ports on one NIC: a group of 8, then one of 2.
    let ports: String = (0..10).map(|i| port(&format!("p{i}"), i, 1, "")).collect();
    let x = system(&[cpu(&nic_pci("0000:0c:00.0", &ports))]);
    let (_, vn) = fuse(&x, &NicFusion::default()).unwrap().unwrap();
    assert_eq!(vn.len(), 2);
    assert_eq!(vn[0].ports, (0..8).collect::<Vec<_>>());
    assert_eq!(vn[1].name, "p8+p9");
    assert_eq!((vn[0].dev, vn[1].dev), (10, 11));
}

#[test]
fn settings_use_nccl_names() {
    let s = TopoSettings::from_lookup(|k| match k {
        "NCCL_NET_MERGE_LEVEL" => Some("PIX".into()),
        "NCCL_NET_FORCE_MERGE" => Some("a,b;c,d".into()),
        "NCCL_NET_MERGE_POLICY" => Some("rail".into()),
        "NCCL_IB_MERGE_NICS" => Some("0".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(s.nic_fusion.merge_level, PathType::Pix);
    assert_eq!(s.nic_fusion.force_merge.as_deref(), Some("a,b;c,d"));
    assert_eq!(s.nic_fusion.merge_policy, NetMergePolicy::Rail);
    assert!(!s.nic_fusion.ib_merge_nics);
    let d = TopoSettings::from_lookup(|_| None).unwrap().nic_fusion;
    assert_eq!(d, NicFusion::default());
    assert_eq!(d.merge_level, PathType::Nvl);
    // kvConvertToInt: prefix match, case-sensitive, LOC when unknown.
    assert_eq!(parse_merge_level("PORT"), PathType::Nvl);
    assert_eq!(parse_merge_level("SYSTEM"), PathType::Sys);
    assert_eq!(parse_merge_level("pix"), PathType::Loc);
    assert_eq!(parse_merge_level("NVL"), PathType::Loc);
}
