//! Property test: mutated versions of the real vendor files never panic the parser or the model;
//! they parse and build, or give an error.

use proptest::prelude::*;

#[path = "support/mutate.rs"]
mod mutate;
use mutate::{apply, Mutation};
use std::path::PathBuf;

fn corpus() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../topologies/vendor");
    let mut v = Vec::new();
    for sub in ["alibaba", "aws", "azure", "oci", "pcie-rtx3090"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "xml") {
                v.push(std::fs::read_to_string(p).unwrap());
            }
        }
    }
    v.sort();
    v
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let snippet = prop_oneof![
        Just("<".to_string()),
        Just(">".to_string()),
        Just("\"".to_string()),
        Just("/>".to_string()),
        Just("</pci>".to_string()),
        Just("<gpu dev=\"9\" sm=\"80\" rank=\"9\" gdr=\"1\"/>".to_string()),
        Just("<nvlink target=\"0000:00:00.0\" count=\"-3\" tclass=\"0x030200\"/>".to_string()),
        Just(
            "<pci busid=\"zz\" class=\"0x060400\" link_speed=\"x\" link_width=\"99999999999\">"
                .to_string()
        ),
        Just(" link_width=\"-1\"".to_string()),
        Just("\t".to_string()),
        Just("&amp;".to_string()),
        Just("é".to_string()),
        "[ -~]{0,12}".prop_map(|s| s),
    ];
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), snippet.clone()).prop_map(|(a, s)| Mutation::Insert(a, s)),
        (any::<usize>(), snippet).prop_map(|(a, s)| Mutation::Replace(a, s)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1usize..200).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]
    #[test]
    fn mutated_real_files_never_panic(file in 0usize..17, muts in prop::collection::vec(mutation(), 1..4)) {
        let files = corpus();
        let text = apply(&files[file % files.len()], &muts);
        if let Ok(root) = topo::xml::parse(&text, "m.xml") {
            let _ = topo::lint::check(&text, &root, "m.xml");
            let gpu = topo::profiles::gpu_model("A100-SXM4").unwrap();
            for completion in [None, Some(topo::Completion { gpu: Some(gpu), nic_speed_mbps: Some(200000) })] {
                if let Ok((x, _)) = topo::cluster::prepare(&root, "m.xml", completion.unwrap_or_default()) {
                    if let Ok(sys) = topo::System::from_xml(&x, "m.xml", &topo::BuildOptions::default()) {
                        let t = topo::Topology::new(sys, &topo::TopoSettings::default());
                        let _ = topo::print::system(&t);
                        let _ = topo::print::matrix(&t);
                        let _ = topo::dot::to_dot(&t);
                    }
                }
            }
        }
    }
}
