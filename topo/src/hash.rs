//! The one stable hash of the workspace: 64-bit FNV-1a (the `fnv` crate), for values that must
//! be equal for equal inputs in every process and build (host hashes exchanged between ranks,
//! cache directory names, made-up UUIDs, NCCL's hashes compared only for equality). Not for
//! hash tables and not cryptographic.

use std::hash::Hasher;

/// FNV-1a's 64-bit offset basis: where [`fnv1a`] starts.
pub const FNV1A_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_parts(FNV1A_BASIS, [bytes])
}

/// The 64-bit FNV-1a hash of `parts` one after another (the hash of their concatenation),
/// starting from `basis` instead of the offset basis when a second, independent hash of the
/// same bytes is wanted.
pub fn fnv1a_parts<'a>(basis: u64, parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h = fnv::FnvHasher::with_key(basis);
    for p in parts {
        h.write(p);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_fnv1a_vectors() {
        // Test vectors of the FNV reference (Noll, "FNV hash" test suite, FNV-1a 64-bit).
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(
            fnv1a_parts(FNV1A_BASIS, [&b"foo"[..], b"bar"]),
            fnv1a(b"foobar")
        );
    }
}
