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
}
