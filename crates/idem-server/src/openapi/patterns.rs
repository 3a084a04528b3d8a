//! The value rules the OpenAPI document states as patterns (keys, namespaces, header names,
//! URLs) and the media type of every problem answer.
//!
//! It owns constants only, shared by the operation and schema passes. It must never import
//! from the rest of the document (it is the leaf both passes read), and a pattern here must
//! never be looser or stricter than the rule the server applies to the same value.

/// The problem+json media type every error is sent with.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A key: 1–255 bytes of visible ASCII (percent-encoded in the path).
pub const KEY_PATTERN: &str = r"^[\x21-\x7E]{1,255}$";
/// A namespace: 1–128 of `A-Z a-z 0-9 . _ - :`.
pub const NAMESPACE_PATTERN: &str = r"^[A-Za-z0-9._:-]{1,128}$";
/// An HTTP header name: one or more RFC 9110 token characters (any case).
pub const HEADER_NAME_PATTERN: &str = r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$";
/// An http(s) URL as the server reads one: the scheme (any case), `://`, an authority without
/// userinfo (no `@`) and without white space or control characters, then anything without
/// U+0000 after a `/`, `?`, `#` or `\`. That the authority is a valid host (and port) is the
/// URL standard's rule, which the server applies too (422 `invalid_field`).
pub const URL_PATTERN: &str =
    r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\@\s\x00-\x1F\x7F-\x9F]+(?:[/?#\\][^\x00]*)?$";
