//! The one checksum kelp uses everywhere: CRC-32C (Castagnoli), the same
//! polynomial as iSCSI, ext4 metadata and Kafka record batches, computed with
//! the SSE 4.2 instruction where the CPU has it.

use crate::error::DecodeError;

/// CRC-32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// CRC-32C continued over `bytes` from a previous value, so one checksum can
/// span discontiguous ranges (a frame's header and its payload).
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

/// The CRC-32C of `a` followed by `b`, from `crc32c(a)`, `crc32c(b)` and
/// `b`'s length, without reading either. This lets one pass over a batch
/// check both its own checksum and the frame's that carries it, and lets a
/// server state a frame's checksum over batches it never reads (each
/// batch's stored checksum stands in for its bytes).
///
/// Multiplication by x^(8 len) modulo the polynomial, with a table of
/// x^(2^k): at most one carry-less multiply per set bit of `len_b`, about
/// 0.1-0.3 us. The `crc32c` crate's own `crc32c_combine` squares a 32x32
/// bit matrix per bit of the length instead, which measured 5-20 us per
/// call here: more than checksumming a 16 KiB batch outright.
#[inline]
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    multiply_mod_p(x_pow_8n_mod_p(len_b as u64), crc_a) ^ crc_b
}

/// `Ok` if the checksum stored with `what` is the one computed over its
/// bytes, else `DecodeError::Checksum` naming `what` and both values: the
/// one check every checksummed structure (frame, batch, chunk header and
/// index) makes.
#[inline]
pub(crate) fn expect_match(
    what: &'static str,
    stored: u32,
    computed: u32,
) -> Result<(), DecodeError> {
    if stored == computed {
        Ok(())
    } else {
        Err(DecodeError::Checksum {
            what,
            stored,
            computed,
        })
    }
}

/// Below this many bytes, checksumming the bytes again costs less than
/// folding checksums with [`crc32c_combine`]; readers and the broker's
/// one-pass checks read small batches twice instead.
pub const COMBINE_MIN_BYTES: usize = 16 << 10;

/// CRC-32C's polynomial, bit-reflected.
const POLY_REFLECTED: u32 = 0x82F6_3B78;

/// `a * b` modulo the polynomial, in the reflected bit order CRC-32C uses
/// (bit 31 is x^0).
const fn multiply_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 {
            (b >> 1) ^ POLY_REFLECTED
        } else {
            b >> 1
        };
    }
    p
}

/// `X_POW_2K[k]` is x^(2^k) modulo the polynomial.
const X_POW_2K: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 64 {
        t[k] = multiply_mod_p(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// x^(8 n) modulo the polynomial: the operator that appends `n` zero bytes.
fn x_pow_8n_mod_p(mut n: u64) -> u32 {
    let mut p = 1u32 << 31; // x^0
    let mut k = 3; // 8 n = n * 2^3
    while n != 0 {
        if n & 1 != 0 {
            p = multiply_mod_p(X_POW_2K[k & 63], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn append_equals_whole() {
        let whole = crc32c(b"hello world");
        assert_eq!(crc32c_append(crc32c(b"hello "), b"world"), whole);
    }

    #[test]
    fn combine_equals_whole() {
        let b = vec![0x5Au8; 70_000];
        let whole = crc32c_append(crc32c(b"frame head"), &b);
        assert_eq!(
            crc32c_combine(crc32c(b"frame head"), crc32c(&b), b.len()),
            whole
        );
        assert_eq!(crc32c_combine(crc32c(b"x"), crc32c(b""), 0), crc32c(b"x"));
        assert_eq!(crc32c_combine(0, crc32c(&b), b.len()), crc32c(&b));
    }

    /// The table-driven combine agrees with the crate's matrix one.
    #[test]
    fn combine_agrees_with_the_crate() {
        let mut x = 0x1234_5678u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (a, b) = (x as u32, (x >> 32) as u32);
            let len = (x >> 11) as usize % (9 << 20);
            assert_eq!(
                crc32c_combine(a, b, len),
                crc32c::crc32c_combine(a, b, len),
                "seed state {x:#x}"
            );
        }
    }
}
