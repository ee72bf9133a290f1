//! The key hash: MurmurHash3 x86_32 with seed 0 over the record key bytes.
//!
//! It places a key on the ring `[0, 2^32)`; a segment covers a half-open
//! range of that ring. The hash is part of the format: changing it would move
//! keys between segments and break per-key order, so it is pinned by golden
//! vectors below.

const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

/// The stable 32-bit hash of a record key.
pub fn key_hash(key: &[u8]) -> u32 {
    let mut h: u32 = 0;
    let mut blocks = key.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    let mut k: u32 = 0;
    for (i, byte) in tail.iter().enumerate() {
        k |= u32::from(*byte) << (8 * i);
    }
    if !tail.is_empty() {
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    // The length is mixed in modulo 2^32, as the reference does.
    h ^= key.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_vectors() {
        // Values of the reference MurmurHash3_x86_32 with seed 0.
        assert_eq!(key_hash(b""), 0);
        assert_eq!(key_hash(b"hello"), 0x248b_fa47);
        assert_eq!(key_hash(b"Hello, world!"), 0xc036_3e43);
        assert_eq!(
            key_hash(b"The quick brown fox jumps over the lazy dog"),
            0x2e4f_f723
        );
        // One of each tail length (1, 2, 3 bytes) and a whole block, as
        // listed in docs/wire-format.md.
        assert_eq!(key_hash(b"a"), 0x3c25_69b2);
        assert_eq!(key_hash(b"ab"), 0x9bbf_d75f);
        assert_eq!(key_hash(b"abc"), 0xb3dd_93fa);
        assert_eq!(key_hash(b"abcd"), 0x43ed_676a);
        assert_eq!(key_hash(b"key"), 0xe29c_6a44);
    }
}
