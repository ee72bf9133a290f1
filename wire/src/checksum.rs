//! The one checksum kelp uses everywhere: CRC-32C (Castagnoli), the same
//! polynomial as iSCSI, ext4 metadata and Kafka record batches, computed with
//! the SSE 4.2 instruction where the CPU has it.

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
#[inline]
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    crc32c::crc32c_combine(crc_a, crc_b, len_b)
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
    }
}
