//! Percent-encoding of path segments and query values: everything but the unreserved
//! characters of RFC 3986 (`A–Z a–z 0–9 - . _ ~`) is escaped, so a key or a name with `/`,
//! `%`, `?` or spaces stays one segment. A leaf: it imports nothing of this crate.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything but the unreserved characters.
pub const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` with everything but the unreserved characters percent-encoded (UTF-8 bytes, `%2F`).
pub fn encode(s: &str) -> String {
    utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_unreserved_characters_stay() {
        assert_eq!(super::encode("a-b._~Z9"), "a-b._~Z9");
        assert_eq!(super::encode("a/b c%é?"), "a%2Fb%20c%25%C3%A9%3F");
    }
}
