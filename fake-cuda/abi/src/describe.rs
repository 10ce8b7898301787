//! The vtable described as data, from the same list that declares it ([`core_api!`]): each
//! entry's name, documentation, arguments and outputs as written there. The C header's table
//! and the Python package's constants are generated from it (`c_table`, `python_module`), and
//! a test of `ncclsim-cuda` keeps the committed files equal to what is generated, so neither
//! can drift from the Rust declaration.

use crate::core_api;

/// One entry of the vtable as [`core_api!`] declares it.
#[derive(Debug, Clone, Copy)]
pub struct EntryDesc {
    /// Its name (the field of `CoreApiV1`).
    pub name: &'static str,
    /// Its documentation attributes, as written (`#[doc = "..."]`, one per line).
    pub docs: &'static [&'static str],
    /// (name, C type) of each argument.
    pub args: &'static [(&'static str, &'static str)],
    /// (name, type) of each output (passed as a pointer to it).
    pub outs: &'static [(&'static str, &'static str)],
}

macro_rules! describe_entries {
    ($(
        $(#[$doc:meta])*
        [$($unsafe:ident)?] fn $name:ident($($arg:ident: $cty:ty $(as $rty:ty)?),* $(,)?)
            -> ($($out:ident: $oty:ty),*);
    )*) => {
        /// Every entry, in table order.
        pub const ENTRIES: &[EntryDesc] = &[$(
            EntryDesc {
                name: stringify!($name),
                docs: &[$(stringify!($doc)),*],
                args: &[$((stringify!($arg), stringify!($cty))),*],
                outs: &[$((stringify!($out), stringify!($oty))),*],
            },
        )*];
    };
}

core_api!(describe_entries);

/// The text of a documentation attribute (`doc = " text"`): the text after its first space.
fn doc_text(attr: &str) -> String {
    let inner = attr
        .trim()
        .strip_prefix("doc")
        .map(str::trim_start)
        .and_then(|s| s.strip_prefix('='))
        .map(str::trim)
        .unwrap_or(attr);
    // Doc comments reach a macro as raw strings (`r" text"`, `r#" text "#`), plain ones as
    // ordinary strings.
    let text = match inner.strip_prefix('r') {
        Some(raw) => {
            let hashes = raw.len() - raw.trim_start_matches('#').len();
            raw[hashes..raw.len() - hashes]
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or(raw)
                .to_string()
        }
        None => inner
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(inner)
            .replace("\\\"", "\"")
            .replace("\\\\", "\\"),
    };
    text.strip_prefix(' ').unwrap_or(&text).to_string()
}

/// The C spelling of a Rust type of the vtable (`out`: the type an output pointer points to).
fn c_type(rust: &str) -> String {
    let t: String = rust.chars().filter(|c| !c.is_whitespace()).collect();
    let scalar = match t.as_str() {
        "u64" => Some("uint64_t"),
        "i64" => Some("int64_t"),
        "u32" => Some("uint32_t"),
        "i32" => Some("int32_t"),
        "u8" => Some("uint8_t"),
        "usize" => Some("uintptr_t"),
        "f64" => Some("double"),
        "f32" => Some("float"),
        "*mutc_void" => Some("void *"),
        "*constc_void" => Some("const void *"),
        "*constc_char" => Some("const char *"),
        "*mutc_char" => Some("char *"),
        "*constu64" => Some("const uint64_t *"),
        "*mutu64" => Some("uint64_t *"),
        "*mutu8" => Some("uint8_t *"),
        "CWorkFn" | "Option<CWorkFn>" => Some("ncclsim_work_fn"),
        "CMeetFn" => Some("ncclsim_meet_fn"),
        "CKernelCost" => Some("struct ncclsim_kernel_cost"),
        "CLaunchTimes" => Some("struct ncclsim_launch_times"),
        "CMaybeTime" => Some("struct ncclsim_maybe_time"),
        _ => None,
    };
    if let Some(s) = scalar {
        return s.to_string();
    }
    match t.strip_prefix("*const") {
        // A borrowed struct of the vtable's C types: its layout is in `fake_cuda_abi`.
        Some(s) if s.starts_with('C') => format!("const void * /* {s} */"),
        _ if t.starts_with('C') => format!("void /* {t} */"),
        _ => panic!("no C spelling for the vtable type {rust:?}"),
    }
}

/// A C parameter: `type name`, or `type *name` for an output.
fn c_param(name: &str, rust: &str, out: bool) -> String {
    let ty = c_type(rust);
    match (out, ty.split_once(" /* ")) {
        (true, Some((base, comment))) => format!("{base} *{name} /* {comment}"),
        (true, None) => format!("{ty} *{name}"),
        (false, Some((base, comment))) if base.ends_with('*') => {
            format!("{base}{name} /* {comment}")
        }
        (false, _) if ty.ends_with('*') => format!("{ty}{name}"),
        (false, _) => format!("{ty} {name}"),
    }
}

/// The fields of `struct ncclsim_core_api_v1` after `last_error_message`, one typed function
/// pointer per entry with its documentation as a comment, indented by four spaces.
pub fn c_table() -> String {
    let mut out = String::new();
    for e in ENTRIES {
        let docs: Vec<String> = e.docs.iter().map(|d| doc_text(d)).collect();
        // The summary paragraph; the rest (safety contracts) is in the Rust documentation.
        let summary: Vec<&str> = docs
            .iter()
            .map(String::as_str)
            .take_while(|l| !l.is_empty())
            .collect();
        if !summary.is_empty() {
            out.push_str(&format!("    /* {} */\n", summary.join("\n     * ")));
        }
        let params: Vec<String> = e
            .args
            .iter()
            .map(|(n, t)| c_param(n, t, false))
            .chain(e.outs.iter().map(|(n, t)| c_param(n, t, true)))
            .collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        out.push_str(&format!("    int (*{})({params});\n", e.name));
    }
    out
}

/// The C spelling of a ctypes field type.
fn c_field_type(ctype: &str) -> &'static str {
    match ctype {
        "c_double" => "double",
        "c_int32" => "int32_t",
        "c_uint32" => "uint32_t",
        "c_uint64" => "uint64_t",
        "c_int64" => "int64_t",
        other => panic!("no C spelling for the ctypes type {other}"),
    }
}

/// The header's generated part: the version, the structs passed by value, and the vtable.
pub fn c_header_block() -> String {
    let mut out = format!(
        "#define NCCLSIM_CORE_ABI_VERSION {}\n\n",
        crate::CORE_ABI_VERSION
    );
    for d in STRUCTS {
        out.push_str(&format!(
            "struct ncclsim_{} {{\n",
            snake_upper(d.name.trim_start_matches('C')).to_lowercase()
        ));
        for (f, t, _) in d.fields {
            out.push_str(&format!("    {} {f};\n", c_field_type(t)));
        }
        out.push_str("};\n\n");
    }
    out.push_str(
        "struct ncclsim_core_api_v1 {\n    size_t size;\n    uint32_t version;\n    \
         size_t (*last_error_message)(char *buf, size_t len);\n",
    );
    out.push_str(&c_table());
    out.push_str("};\n");
    out
}

/// A struct of the vtable's C types as Python's ctypes spells its fields.
pub struct StructDesc {
    /// Its Rust name.
    pub name: &'static str,
    /// Its size in bytes.
    pub size: usize,
    /// (name, ctypes type, byte offset) of each field, in order.
    pub fields: &'static [(&'static str, &'static str, usize)],
}

macro_rules! struct_desc {
    ($t:ident { $($field:ident: $ctype:literal),* $(,)? }) => {
        StructDesc {
            name: stringify!($t),
            size: std::mem::size_of::<crate::$t>(),
            fields: &[$((stringify!($field), $ctype, std::mem::offset_of!(crate::$t, $field))),*],
        }
    };
}

/// The structs the Python package passes through the vtable, field by field (their sizes and
/// offsets from the Rust definitions; a field missing here leaves a gap the test finds).
pub const STRUCTS: &[StructDesc] = &[
    struct_desc!(CKernelCost {
        flops: "c_double",
        bytes: "c_double",
        unit: "c_int32",
        precision: "c_int32",
        batch: "c_uint64",
        m: "c_uint64",
        n: "c_uint64",
        k: "c_uint64",
        attention: "c_uint32",
        flags: "c_uint32",
    }),
    struct_desc!(CMaybeTime {
        present: "c_uint32",
        reserved: "c_uint32",
        ns: "c_uint64",
    }),
    struct_desc!(CLaunchTimes {
        placed: "c_uint32",
        in_range: "c_uint32",
        range: "c_uint64",
        start_ns: "c_uint64",
        duration_ns: "c_uint64",
    }),
];

/// The byte offset of entry `index`'s function pointer in `CoreApiV1`.
pub fn entry_offset(index: usize) -> usize {
    std::mem::offset_of!(crate::CoreApiV1, last_error_message)
        + (index + 1) * std::mem::size_of::<usize>()
}

/// The Python module `ncclsim/_core_abi.py`: the vtable's version, symbol, entry offsets, the
/// codes and the structs the package uses.
pub fn python_module() -> String {
    use crate::error::Status;
    let mut s = String::from(
        "\"\"\"The fake CUDA core's C boundary as ncclsim's Python package calls it.\n\n\
         Generated from the Rust declaration (`fake_cuda_abi::core_api!`, `fake_cuda_abi::describe`)\n\
         by `UPDATE_GENERATED=1 cargo test -p ncclsim-cuda --test generated`; a test keeps it equal\n\
         to what the declaration gives. Do not edit.\n\"\"\"\n\n",
    );
    s.push_str(&format!("CORE_ABI_VERSION = {}\n", crate::CORE_ABI_VERSION));
    s.push_str(&format!("CORE_SYMBOL = \"{}\"\n", crate::CORE_SYMBOL));
    s.push_str(&format!("CORE_LIBRARY = \"{}\"\n\n", crate::CORE_LIBRARY));
    s.push_str(&format!(
        "# Byte offsets of the vtable's size (size_t), version (uint32) and last_error_message.\n\
         SIZE_OFFSET = {}\nVERSION_OFFSET = {}\nLAST_ERROR_MESSAGE_OFFSET = {}\n\n",
        std::mem::offset_of!(crate::CoreApiV1, size),
        std::mem::offset_of!(crate::CoreApiV1, version),
        std::mem::offset_of!(crate::CoreApiV1, last_error_message),
    ));
    s.push_str("# Byte offset of each entry's function pointer in the vtable.\nENTRY_OFFSET = {\n");
    for (i, e) in ENTRIES.iter().enumerate() {
        s.push_str(&format!("    \"{}\": {},\n", e.name, entry_offset(i)));
    }
    s.push_str("}\n\n");
    for (name, v) in [
        ("UNIT_VECTOR", crate::UNIT_VECTOR),
        ("UNIT_TENSOR", crate::UNIT_TENSOR),
        ("PRECISION_F64", crate::PRECISION_F64),
        ("PRECISION_F32", crate::PRECISION_F32),
        ("PRECISION_TF32", crate::PRECISION_TF32),
        ("PRECISION_F16", crate::PRECISION_F16),
        ("PRECISION_BF16", crate::PRECISION_BF16),
        ("PRECISION_F8", crate::PRECISION_F8),
        ("RUN_COMPUTE_UNSET", crate::RUN_COMPUTE_UNSET as i32),
        ("RUN_COMPUTE_RUN", crate::RUN_COMPUTE_RUN as i32),
        ("RUN_COMPUTE_TIME", crate::RUN_COMPUTE_TIME as i32),
        ("RUN_COMPUTE_OFF", crate::RUN_COMPUTE_OFF as i32),
        ("ATTENTION_NONE", crate::ATTENTION_NONE as i32),
        ("ATTENTION_FLASH", crate::ATTENTION_FLASH as i32),
        (
            "ATTENTION_MEM_EFFICIENT",
            crate::ATTENTION_MEM_EFFICIENT as i32,
        ),
        ("ATTENTION_CUDNN", crate::ATTENTION_CUDNN as i32),
        ("COST_BACKWARD", crate::COST_BACKWARD as i32),
        ("COST_CAUSAL", crate::COST_CAUSAL as i32),
        ("COST_HOST_OP", crate::COST_HOST_OP as i32),
        ("STEP_QUERY", crate::STEP_QUERY),
        ("STEP_BY_OPTIMIZER", crate::STEP_BY_OPTIMIZER),
        ("STEP_BY_PROFILER", crate::STEP_BY_PROFILER),
    ] {
        s.push_str(&format!("{name} = {v}\n"));
    }
    s.push('\n');
    for code in 0..=14 {
        let st = Status::from_code(code);
        s.push_str(&format!(
            "STATUS_{} = {}\n",
            snake_upper(&format!("{st:?}")),
            st as i32
        ));
    }
    s.push('\n');
    for d in STRUCTS {
        s.push_str(&format!(
            "# (field, ctypes type, byte offset) of {}, {} bytes.\n{}_FIELDS = [\n",
            d.name,
            d.size,
            snake_upper(d.name.trim_start_matches('C'))
        ));
        for (f, t, off) in d.fields {
            s.push_str(&format!("    (\"{f}\", \"{t}\", {off}),\n"));
        }
        s.push_str("]\n");
        s.push_str(&format!(
            "{}_SIZE = {}\n\n",
            snake_upper(d.name.trim_start_matches('C')),
            d.size
        ));
    }
    s.trim_end().to_string() + "\n"
}

/// `CaptureViolation` as `CAPTURE_VIOLATION`.
fn snake_upper(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_a_c_spelling_and_its_documentation() {
        let table = c_table();
        for e in ENTRIES {
            assert!(table.contains(&format!("(*{})(", e.name)), "{}", e.name);
        }
        assert!(table.contains(
            "int (*launch_compute)(uint64_t stream, struct ncclsim_kernel_cost cost, \
             const char *name, const char *detail, ncclsim_work_fn work, void *data, \
             ncclsim_work_fn release, struct ncclsim_launch_times *times);"
        ));
        assert!(table.contains("int (*device_count)(int32_t *count);"));
        assert!(table.contains("    /* Visible device count. */\n"));
    }

    #[test]
    fn the_described_structs_cover_every_byte() {
        for d in STRUCTS {
            let mut end = 0;
            for (f, t, off) in d.fields {
                assert_eq!(*off, end, "{}.{f} follows the previous field", d.name);
                end += match *t {
                    "c_double" | "c_uint64" | "c_int64" => 8,
                    "c_int32" | "c_uint32" => 4,
                    other => panic!("{other}"),
                };
            }
            assert_eq!(end, d.size, "{} has no field left out", d.name);
        }
    }

    #[test]
    fn entry_offsets_are_the_vtable_fields() {
        let first = std::mem::offset_of!(crate::CoreApiV1, device_count);
        assert_eq!(entry_offset(0), first);
        let i = ENTRIES
            .iter()
            .position(|e| e.name == "launch_compute")
            .unwrap();
        assert_eq!(
            entry_offset(i),
            std::mem::offset_of!(crate::CoreApiV1, launch_compute)
        );
        assert_eq!(
            entry_offset(ENTRIES.len()),
            std::mem::size_of::<crate::CoreApiV1>()
        );
    }
}
