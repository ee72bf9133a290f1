//! Turning records into text lines and text lines into records.
//!
//! Output: key and value bytes are printed as-is when they are printable
//! UTF-8; a tab, newline, carriage return and backslash print as `\t`, `\n`,
//! `\r` and `\\`, and every other control byte and every byte that is not
//! part of valid UTF-8 prints as `\xNN`. So one record is always one line
//! and its fields never contain a raw tab.
//!
//! Input: a line is split on its first tab into key and value; a line with
//! no tab is a value with no key. Bytes are taken as-is (no unescaping); the
//! line ending (`\n` or `\r\n`) is not part of the value.

/// Append `bytes` to `out`, escaped as the module docs say.
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        let mut plain_from = 0;
        for (i, &b) in valid.iter().enumerate() {
            let escaped: Option<&[u8]> = match b {
                b'\t' => Some(b"\\t"),
                b'\n' => Some(b"\\n"),
                b'\r' => Some(b"\\r"),
                b'\\' => Some(b"\\\\"),
                0x00..=0x1f | 0x7f => None,
                _ => continue,
            };
            out.extend_from_slice(&valid[plain_from..i]);
            match escaped {
                Some(e) => out.extend_from_slice(e),
                None => push_hex(out, b),
            }
            plain_from = i + 1;
        }
        out.extend_from_slice(&valid[plain_from..]);
        for &b in chunk.invalid() {
            push_hex(out, b);
        }
    }
}

fn push_hex(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(&[
        b'\\',
        b'x',
        HEX[usize::from(b >> 4)],
        HEX[usize::from(b & 0xf)],
    ]);
}

/// `bytes` escaped, as a string (for tests and messages).
#[cfg(test)]
pub fn escape(bytes: &[u8]) -> String {
    let mut out = Vec::new();
    escape_into(&mut out, bytes);
    String::from_utf8_lossy(&out).into_owned()
}

/// Split an input line (its ending included or not) into key and value.
pub fn split_line(line: &[u8]) -> (&[u8], &[u8]) {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match line.iter().position(|&b| b == b'\t') {
        Some(tab) => (&line[..tab], &line[tab + 1..]),
        None => (&[], line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_the_first_tab() {
        assert_eq!(split_line(b"k\tv\n"), (&b"k"[..], &b"v"[..]));
        assert_eq!(split_line(b"k\tv\tw"), (&b"k"[..], &b"v\tw"[..]));
        assert_eq!(
            split_line(b"just a value\r\n"),
            (&b""[..], &b"just a value"[..])
        );
        assert_eq!(split_line(b"\tvalue"), (&b""[..], &b"value"[..]));
        assert_eq!(split_line(b"key\t\n"), (&b"key"[..], &b""[..]));
        assert_eq!(split_line(b"\n"), (&b""[..], &b""[..]));
    }

    #[test]
    fn escapes_what_is_not_printable() {
        assert_eq!(escape(b"plain text"), "plain text");
        assert_eq!(escape("héllo ✓".as_bytes()), "héllo ✓");
        assert_eq!(escape(b"a\tb\nc\rd\\e"), "a\\tb\\nc\\rd\\\\e");
        assert_eq!(escape(b"\x00\x1b\x7f"), "\\x00\\x1b\\x7f");
        assert_eq!(escape(b"ok\xff\xfe!"), "ok\\xff\\xfe!");
        // A truncated multi-byte sequence is escaped byte by byte.
        assert_eq!(escape(&"é".as_bytes()[..1]), "\\xc3");
        assert_eq!(escape(b""), "");
    }
}
