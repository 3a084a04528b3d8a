//! The egress guard's rules: which destinations an outbound request of idem may reach.
//!
//! A namespace policy carries `egress: {allow: [...], allow_private: false}`. This module
//! parses and checks the `allow` entries ([`AllowEntry::parse`]: exact host names, `*.suffix`
//! patterns, either with `:port`, IP addresses with or without a port, CIDR blocks), matches a
//! URL's host against them before it is resolved ([`name_listing`]) and decides for every
//! address a name resolved to (or an IP literal) whether a connection may go there
//! ([`check_addr`], using [`classify_addr`]). IPv4-mapped, IPv4-compatible, NAT64 and 6to4
//! forms of an IPv6 address are judged as the IPv4 address they carry.
//!
//! What this module must never do: resolve a name or open a connection (that is the egress
//! client's, which connects only to addresses this module passed), or let a `*.` pattern open
//! loopback, link-local, metadata or other special addresses: only an exact host entry or an
//! address/CIDR entry does.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most entries an `allow` list may have.
pub const MAX_ALLOW_ENTRIES: usize = 256;
/// Longest entry, characters.
pub const MAX_ENTRY_LEN: usize = 300;

/// The `egress` member of a namespace policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressPolicy {
    pub allow: Vec<AllowEntry>,
    /// Opens the private ranges (RFC 1918, fc00::/7, CGNAT); never loopback, link-local or
    /// the metadata address.
    pub allow_private: bool,
}

impl EgressPolicy {
    /// The policy that lets exactly `url`'s own host and port through (for destinations an
    /// admin configured one by one: an intake source's `forward.url`, a namespace's
    /// `alert_url`). An exact host entry opens what that host resolves to, loopback and
    /// private addresses included; the guard still pins the checked address, refuses
    /// unspecified and multicast addresses, and nothing follows a redirect. `None` when the
    /// URL has no host.
    pub fn exactly(url: &str) -> Option<EgressPolicy> {
        let u = url::Url::parse(url).ok()?;
        let host = u.host_str()?;
        let port = u.port_or_known_default()?;
        let entry = if host.contains(':') {
            format!("[{}]:{port}", host.trim_matches(|c| c == '[' || c == ']'))
        } else {
            format!("{host}:{port}")
        };
        Some(EgressPolicy {
            allow: vec![AllowEntry::parse(&entry).ok()?],
            allow_private: false,
        })
    }
}

/// What an entry matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// A host name, lowercase, no trailing dot.
    Exact(String),
    /// `*.example.com`: every name below `example.com` (not `example.com` itself). Stored
    /// as the suffix with its leading dot (`.example.com`).
    Suffix(String),
    /// One address.
    Ip(IpAddr),
    /// A block of addresses (network address, prefix length).
    Cidr(IpAddr, u8),
}

/// One entry of `allow`, as parsed from its text (and shown as that text, normalized).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    pub pattern: HostPattern,
    /// Only this port (`host:port`); `None`: every port.
    pub port: Option<u16>,
}

/// Why an entry was refused (the API shows the sentence under `egress.allow[i]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EntryError(pub String);

fn bad(msg: impl Into<String>) -> EntryError {
    EntryError(msg.into())
}

impl AllowEntry {
    /// Parses one entry: `api.example.com`, `*.example.com`, `host:8443`, `10.0.0.5`,
    /// `127.0.0.1:8080`, `[::1]:8080`, `::1`, `10.0.0.0/8`, `fd00::/8`. Any input, never
    /// panics (a fuzz target).
    pub fn parse(text: &str) -> Result<AllowEntry, EntryError> {
        let s = text.trim();
        if s.is_empty() {
            return Err(bad("must not be empty"));
        }
        if s.chars().count() > MAX_ENTRY_LEN {
            return Err(bad(format!("must be at most {MAX_ENTRY_LEN} characters")));
        }
        if let Some((ip, len)) = s.split_once('/') {
            let ip: IpAddr = ip
                .parse()
                .map_err(|_| bad("a CIDR block is ADDRESS/PREFIX, e.g. 10.0.0.0/8"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len: u8 = len
                .parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| bad(format!("the prefix length must be 0 to {max}")))?;
            return Ok(AllowEntry {
                pattern: HostPattern::Cidr(network(ip, len), len),
                port: None,
            });
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(AllowEntry {
                pattern: HostPattern::Ip(ip),
                port: None,
            });
        }
        if let Some(rest) = s.strip_prefix('[') {
            let (ip, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address in brackets needs the closing ]"))?;
            let ip: Ipv6Addr = ip.parse().map_err(|_| bad("not an IPv6 address"))?;
            let port = match after {
                "" => None,
                p => Some(parse_port(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected :PORT after ]"))?,
                )?),
            };
            return Ok(AllowEntry {
                pattern: HostPattern::Ip(IpAddr::V6(ip)),
                port,
            });
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(parse_port(p)?)),
            None => (s, None),
        };
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Ok(AllowEntry {
                pattern: HostPattern::Ip(IpAddr::V4(ip)),
                port,
            });
        }
        let (wild, name) = match host.strip_prefix("*.") {
            Some(n) => (true, n),
            None => (false, host),
        };
        let name = valid_name(name)?;
        if name
            .split('.')
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(bad("not a host name or an IPv4 address"));
        }
        let pattern = if wild {
            HostPattern::Suffix(format!(".{name}"))
        } else {
            HostPattern::Exact(name)
        };
        Ok(AllowEntry { pattern, port })
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether a matching address entry names addresses of `class` on purpose: an IP entry
    /// does, a CIDR entry only when its whole range is of that class.
    fn lists_class(&self, class: AddrClass) -> bool {
        match &self.pattern {
            HostPattern::Ip(_) => true,
            HostPattern::Cidr(net, len) => {
                classify_addr(*net) == class && classify_addr(last_in(*net, *len)) == class
            }
            HostPattern::Exact(_) | HostPattern::Suffix(_) => false,
        }
    }

    /// The entry matches this address (an IP or CIDR entry and the port).
    pub fn matches_addr(&self, ip: IpAddr, port: u16) -> bool {
        if !self.port_matches(port) {
            return false;
        }
        match &self.pattern {
            HostPattern::Ip(want) => canonical(*want) == canonical(ip),
            HostPattern::Cidr(net, len) => in_cidr(ip, *net, *len),
            HostPattern::Exact(_) | HostPattern::Suffix(_) => false,
        }
    }
}

fn parse_port(p: &str) -> Result<u16, EntryError> {
    p.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad("the port must be 1 to 65535"))
}

/// A DNS name as a URL parser leaves it: lowercase letters, digits, `-` and `_`, labels of 1
/// to 63, at most 253 in all; a trailing dot is dropped.
fn valid_name(name: &str) -> Result<String, EntryError> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() || name.len() > 253 {
        return Err(bad("a host name has 1 to 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(bad("each label of a host name has 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(bad(
                "a host name has letters, digits and inner hyphens only (write IDNs as \
                 xn-- punycode; `*.` only as a prefix)",
            ));
        }
    }
    Ok(name)
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.pattern, self.port) {
            (HostPattern::Exact(n), None) => f.write_str(n),
            (HostPattern::Exact(n), Some(p)) => write!(f, "{n}:{p}"),
            (HostPattern::Suffix(s), None) => write!(f, "*{s}"),
            (HostPattern::Suffix(s), Some(p)) => write!(f, "*{s}:{p}"),
            (HostPattern::Ip(ip), None) => write!(f, "{ip}"),
            (HostPattern::Ip(IpAddr::V4(ip)), Some(p)) => write!(f, "{ip}:{p}"),
            (HostPattern::Ip(IpAddr::V6(ip)), Some(p)) => write!(f, "[{ip}]:{p}"),
            (HostPattern::Cidr(ip, len), _) => write!(f, "{ip}/{len}"),
        }
    }
}

impl Serialize for AllowEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AllowEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AllowEntry::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// What kind of address an IP is, for the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrClass {
    Public,
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// RFC 1918, fc00::/7 (and the deprecated site-local fec0::/10).
    Private,
    /// 100.64.0.0/10 (carrier-grade NAT).
    Cgnat,
    /// 169.254.0.0/16 (the cloud metadata address 169.254.169.254 among them), fe80::/10.
    LinkLocal,
    /// 224.0.0.0/4, ff00::/8, 255.255.255.255.
    Multicast,
    /// 0.0.0.0/8, :: (on Linux a connection to 0.0.0.0 reaches the local host).
    Unspecified,
    /// 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32.
    Documentation,
    /// Other special-purpose blocks (192.0.0.0/24, 198.18.0.0/15, 240.0.0.0/4, 64:ff9b:1::/48,
    /// 100::/64, 2001::/23 …): nothing a webhook lives on.
    Reserved,
}

impl AddrClass {
    pub fn as_str(self) -> &'static str {
        match self {
            AddrClass::Public => "public",
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::Cgnat => "carrier-grade NAT",
            AddrClass::LinkLocal => "link-local/metadata",
            AddrClass::Multicast => "multicast",
            AddrClass::Unspecified => "unspecified",
            AddrClass::Documentation => "documentation",
            AddrClass::Reserved => "reserved",
        }
    }
}

/// The IPv4 address an IPv6 address stands for, when it is one of the forms that carry one
/// (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
/// `2002:AABB:CCDD::/48`); `None` otherwise.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if s[..5] == [0; 5] && s[5] == 0xffff {
        return Some(tail);
    }
    // ::a.b.c.d, but not :: and ::1 (those are IPv6's own).
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(tail);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

/// The address as judged: an IPv6 address carrying an IPv4 one is that IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let o = ip.octets();
    let n = u32::from(ip);
    let within = |net: u32, len: u32| len == 0 || (n ^ net) >> (32 - len) == 0;
    if o[0] == 0 {
        AddrClass::Unspecified
    } else if o[0] == 127 {
        AddrClass::Loopback
    } else if o[0] == 10 || within(0xac10_0000, 12) || within(0xc0a8_0000, 16) {
        AddrClass::Private
    } else if within(0x6440_0000, 10) {
        AddrClass::Cgnat
    } else if within(0xa9fe_0000, 16) {
        AddrClass::LinkLocal
    } else if within(0xe000_0000, 4) {
        AddrClass::Multicast
    } else if within(0xc000_0200, 24) || within(0xc633_6400, 24) || within(0xcb00_7100, 24) {
        AddrClass::Documentation
    } else if within(0xc000_0000, 24) || within(0xc612_0000, 15) || within(0xf000_0000, 4) {
        // 255.255.255.255 is inside 240.0.0.0/4.
        AddrClass::Reserved
    } else {
        AddrClass::Public
    }
}

/// Classifies an address (IPv6 forms of IPv4 addresses as the IPv4 address).
pub fn classify_addr(ip: IpAddr) -> AddrClass {
    match canonical(ip) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_unspecified() {
                AddrClass::Unspecified
            } else if v6.is_loopback() {
                AddrClass::Loopback
            } else if s[0] & 0xfe00 == 0xfc00 || s[0] & 0xffc0 == 0xfec0 {
                AddrClass::Private
            } else if s[0] & 0xffc0 == 0xfe80 {
                AddrClass::LinkLocal
            } else if s[0] & 0xff00 == 0xff00 {
                AddrClass::Multicast
            } else if s[0] == 0x2001 && s[1] == 0x0db8 {
                AddrClass::Documentation
            } else if (s[0] == 0x2001 && s[1] < 0x0200)
                || (s[0] == 0x0100 && s[1..4] == [0, 0, 0])
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1)
                || s[0] & 0xe000 != 0x2000
            {
                // 2001::/23 (Teredo, ORCHID, benchmarking…), the discard prefix, local-use
                // NAT64, and everything outside 2000::/3 (not global unicast).
                AddrClass::Reserved
            } else {
                AddrClass::Public
            }
        }
    }
}

fn network(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// The last address of the block `net/len`.
fn last_in(net: IpAddr, len: u8) -> IpAddr {
    match net {
        IpAddr::V4(a) => {
            let host = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) | host).into())
        }
        IpAddr::V6(a) => {
            let host = u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) | host).into())
        }
    }
}

fn in_cidr(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    let direct = match (ip, net) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => network(ip, len) == net,
        _ => false,
    };
    // A mapped form of an address in an IPv4 block is in the block.
    direct
        || match (canonical(ip), net) {
            (c @ IpAddr::V4(_), IpAddr::V4(_)) if c != ip => network(c, len) == net,
            _ => false,
        }
}

/// How a URL's host name is listed in `allow` (before resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameListing {
    /// Not matched by any name entry.
    No,
    /// Matched by a `*.suffix` entry: its addresses must still be public (or private with
    /// `allow_private`).
    Pattern,
    /// Matched by an exact host entry: the operator named this host, so special addresses it
    /// resolves to pass too.
    Exact,
}

/// How the name `host` (lowercase, as a URL parser leaves it) on `port` is listed.
pub fn name_listing(policy: &EgressPolicy, host: &str, port: u16) -> NameListing {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let mut best = NameListing::No;
    for e in &policy.allow {
        if !e.port_matches(port) {
            continue;
        }
        match &e.pattern {
            HostPattern::Exact(n) if *n == host => return NameListing::Exact,
            HostPattern::Suffix(s) if host.ends_with(s.as_str()) && host.len() > s.len() => {
                best = NameListing::Pattern
            }
            _ => {}
        }
    }
    best
}

/// Whether a name may be resolved at all: with a non-empty `allow`, only a name that a name
/// entry (exact host or `*.suffix`) matches on this port passes, and it is refused at once,
/// by name, before any lookup. Address and CIDR entries match IP literals and the addresses
/// a listed name resolves to; they never admit a name nobody listed (an unlisted name is
/// "not listed" whether or not it resolves, never a retryable "did not resolve").
pub fn name_may_pass(policy: &EgressPolicy, host: &str, port: u16) -> bool {
    policy.allow.is_empty() || name_listing(policy, host, port) != NameListing::No
}

/// Headers of the message's framing and of one connection (hop by hop): a request idem sends
/// never carries them from elsewhere — an effect's or an action's `headers`, the inbound
/// headers an intake source forwards — since they would describe another message or another
/// connection (a split event is shorter than its batch; the inbound `Host` is idem's).
pub const CONNECTION_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the destination is not in the namespace's egress allow list")]
    NotListed,
    #[error("{} addresses are not allowed{}", .0.as_str(), hint(*.0))]
    Address(AddrClass),
}

fn hint(c: AddrClass) -> &'static str {
    match c {
        AddrClass::Private | AddrClass::Cgnat => {
            " (set egress.allow_private, or list the host or address in egress.allow)"
        }
        AddrClass::Multicast | AddrClass::Unspecified => "",
        _ => " unless the host or address is listed in egress.allow",
    }
}

/// May a connection go to `ip:port`, reached through a name listed as `name` (`No` for an
/// IP literal)?
pub fn check_addr(
    policy: &EgressPolicy,
    ip: IpAddr,
    port: u16,
    name: NameListing,
) -> Result<(), Refusal> {
    let class = classify_addr(ip);
    let addr_listed = policy.allow.iter().any(|e| e.matches_addr(ip, port));
    if !policy.allow.is_empty() && !addr_listed && name == NameListing::No {
        return Err(Refusal::NotListed);
    }
    // A special address (loopback, link-local and metadata, private…) counts as listed by an
    // address entry, or by a CIDR entry that lies wholly in its class (`127.0.0.0/8`,
    // `169.254.169.254/32`, `10.0.0.0/8`), never by a catch-all such as `0.0.0.0/0`: "any
    // address" does not say "the metadata service too".
    let exact = name == NameListing::Exact
        || policy
            .allow
            .iter()
            .any(|e| e.matches_addr(ip, port) && e.lists_class(class));
    match class {
        AddrClass::Public => Ok(()),
        // Never a destination, listed or not.
        c @ (AddrClass::Multicast | AddrClass::Unspecified) => Err(Refusal::Address(c)),
        AddrClass::Private | AddrClass::Cgnat if policy.allow_private || exact => Ok(()),
        _ if exact => Ok(()),
        c => Err(Refusal::Address(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }
    /// The policy as a namespace's JSON gives it (every entry through [`AllowEntry::parse`]).
    fn pol(allow: &[&str], private: bool) -> EgressPolicy {
        let v = serde_json::json!({"allow": allow, "allow_private": private});
        serde_json::from_value(v).expect("policy")
    }

    #[test]
    fn every_class_of_address() {
        use AddrClass::*;
        for (a, c) in [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("172.32.0.1", Public),
            ("172.15.255.255", Public),
            ("192.168.1.1", Private),
            ("192.169.0.1", Public),
            ("100.64.0.1", Cgnat),
            ("100.127.255.255", Cgnat),
            ("100.128.0.1", Public),
            ("100.63.255.255", Public),
            ("169.254.169.254", LinkLocal),
            ("169.254.0.1", LinkLocal),
            ("224.0.0.1", Multicast),
            ("239.255.255.255", Multicast),
            ("255.255.255.255", Reserved),
            ("240.0.0.1", Reserved),
            ("192.0.2.7", Documentation),
            ("198.51.100.7", Documentation),
            ("203.0.113.7", Documentation),
            ("192.0.0.8", Reserved),
            ("198.18.0.1", Reserved),
            ("198.19.255.255", Reserved),
            ("8.8.8.8", Public),
            ("1.1.1.1", Public),
            ("::", Unspecified),
            ("::1", Loopback),
            ("fc00::1", Private),
            ("fd12:3456::1", Private),
            ("fec0::1", Private),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("2001::1", Reserved),
            ("100::1", Reserved),
            ("64:ff9b:1::1", Reserved),
            ("3fff::1", Public),
            ("2606:4700::1111", Public),
            ("2a00:1450::1", Public),
            ("4000::1", Reserved),
        ] {
            assert_eq!(classify_addr(ip(a)), c, "{a}");
        }
    }

    #[test]
    fn ipv6_forms_of_ipv4_addresses_are_judged_as_ipv4() {
        use AddrClass::*;
        for (a, c) in [
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:169.254.169.254", LinkLocal),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:8.8.8.8", Public),
            ("::127.0.0.1", Loopback),
            ("::10.0.0.1", Private),
            ("64:ff9b::7f00:1", Loopback),
            ("64:ff9b::a9fe:a9fe", LinkLocal),
            ("2002:7f00:1::", Loopback),
            ("2002:c0a8:101::1", Private),
            ("2002:808:808::1", Public),
        ] {
            assert_eq!(classify_addr(ip(a)), c, "{a}");
        }
        assert_eq!(embedded_v4("::1".parse().expect("v6")), None);
        assert_eq!(embedded_v4("::".parse().expect("v6")), None);
    }

    #[test]
    fn entries_parse_and_print_back() {
        for (text, shown) in [
            ("api.example.com", "api.example.com"),
            ("API.Example.COM.", "api.example.com"),
            ("*.example.com", "*.example.com"),
            ("*.example.com:8443", "*.example.com:8443"),
            ("hooks.example.com:443", "hooks.example.com:443"),
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("::1", "::1"),
            ("[::1]", "::1"),
            ("[::1]:8080", "[::1]:8080"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("fd00::/8", "fd00::/8"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("localhost", "localhost"),
            ("svc_1.internal", "svc_1.internal"),
        ] {
            let e = AllowEntry::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(e.to_string(), shown, "{text}");
            assert_eq!(AllowEntry::parse(shown).as_ref(), Ok(&e), "{shown}");
        }
    }

    #[test]
    fn bad_entries_are_refused() {
        for text in [
            "",
            "  ",
            "http://example.com",
            "example.com/path",
            "*",
            "*.",
            "a.*.example.com",
            "ex ample.com",
            "example..com",
            "-x.example.com",
            "x-.example.com",
            "example.com:0",
            "example.com:65536",
            "example.com:http",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/x",
            "nope/8",
            "[::1",
            "[::1]8080",
            "[1.2.3.4]",
            "999.1.1.1",
            "1.2.3",
            "\u{e9}.example.com",
            "a\u{0}b",
            &"a".repeat(64),
            &format!("{}.com", "a.".repeat(200)),
        ] {
            assert!(AllowEntry::parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn parse_never_panics_on_odd_input() {
        // A small deterministic fuzz: every short string over a hostile alphabet.
        let alphabet: Vec<char> = "a1.*:[]/-_ \u{0}\u{e9}f%".chars().collect();
        let n = alphabet.len();
        for len in 0..=4u32 {
            for mut i in 0..n.pow(len) {
                let mut s = String::new();
                for _ in 0..len {
                    s.push(alphabet[i % n]);
                    i /= n;
                }
                if let Ok(e) = AllowEntry::parse(&s) {
                    // Whatever parses prints as something that parses to the same entry.
                    assert_eq!(AllowEntry::parse(&e.to_string()), Ok(e.clone()), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn names_match_exactly_or_below_a_suffix_case_insensitively() {
        let p = pol(
            &["api.example.com", "*.hooks.example.net", "x.test:8443"],
            false,
        );
        assert_eq!(name_listing(&p, "api.example.com", 443), NameListing::Exact);
        assert_eq!(name_listing(&p, "API.example.com.", 80), NameListing::Exact);
        assert_eq!(name_listing(&p, "b.api.example.com", 443), NameListing::No);
        assert_eq!(name_listing(&p, "example.com", 443), NameListing::No);
        assert_eq!(
            name_listing(&p, "a.hooks.example.net", 443),
            NameListing::Pattern
        );
        assert_eq!(
            name_listing(&p, "a.b.hooks.example.net", 1),
            NameListing::Pattern
        );
        assert_eq!(name_listing(&p, "hooks.example.net", 443), NameListing::No);
        assert_eq!(name_listing(&p, "xhooks.example.net", 443), NameListing::No);
        assert_eq!(name_listing(&p, "x.test", 8443), NameListing::Exact);
        assert_eq!(name_listing(&p, "x.test", 443), NameListing::No);
        assert!(name_may_pass(&p, "api.example.com", 443));
        assert!(!name_may_pass(&p, "evil.example.org", 443));
        assert!(name_may_pass(&pol(&[], false), "anything.example", 443));
        // Address entries never admit a name: it is refused by name, before any lookup.
        assert!(!name_may_pass(
            &pol(&["10.0.0.0/8"], false),
            "svc.local",
            80
        ));
        assert!(!name_may_pass(
            &pol(&["127.0.0.1:8080"], false),
            "api.stripe.com",
            443
        ));
        assert!(name_may_pass(
            &pol(&["127.0.0.1:8080", "api.stripe.com"], false),
            "API.Stripe.com",
            443
        ));
    }

    #[test]
    fn defaults_refuse_every_special_address_and_pass_public_ones() {
        let p = EgressPolicy::default();
        for a in [
            "127.0.0.1",
            "::1",
            "10.0.0.1",
            "192.168.0.1",
            "172.16.5.4",
            "fd00::1",
            "169.254.169.254",
            "fe80::1",
            "100.64.0.1",
            "224.0.0.1",
            "0.0.0.0",
            "::",
            "192.0.2.1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(
                check_addr(&p, ip(a), 443, NameListing::No).is_err(),
                "{a} must be refused"
            );
        }
        for a in ["8.8.8.8", "2606:4700::1111", "::ffff:1.1.1.1"] {
            assert_eq!(check_addr(&p, ip(a), 443, NameListing::No), Ok(()), "{a}");
        }
    }

    #[test]
    fn allow_private_opens_private_ranges_only() {
        let p = pol(&[], true);
        for a in [
            "10.0.0.1",
            "192.168.0.1",
            "fd00::1",
            "100.64.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(check_addr(&p, ip(a), 80, NameListing::No), Ok(()), "{a}");
        }
        for a in [
            "127.0.0.1",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "192.0.2.1",
        ] {
            assert!(check_addr(&p, ip(a), 80, NameListing::No).is_err(), "{a}");
        }
    }

    #[test]
    fn listing_opens_special_addresses_with_the_port_it_names() {
        let p = pol(&["127.0.0.1:8080"], false);
        assert_eq!(
            check_addr(&p, ip("127.0.0.1"), 8080, NameListing::No),
            Ok(())
        );
        assert_eq!(
            check_addr(&p, ip("::ffff:127.0.0.1"), 8080, NameListing::No),
            Ok(())
        );
        assert_eq!(
            check_addr(&p, ip("127.0.0.1"), 8081, NameListing::No),
            Err(Refusal::NotListed)
        );
        // A non-empty allow list lets nothing else through, public or not.
        assert_eq!(
            check_addr(&p, ip("8.8.8.8"), 8080, NameListing::No),
            Err(Refusal::NotListed)
        );
        let meta = pol(&["169.254.169.254"], false);
        assert_eq!(
            check_addr(&meta, ip("169.254.169.254"), 80, NameListing::No),
            Ok(())
        );
        let block = pol(&["10.0.0.0/8"], false);
        assert_eq!(
            check_addr(&block, ip("10.9.9.9"), 1, NameListing::No),
            Ok(())
        );
        assert_eq!(
            check_addr(&block, ip("::ffff:10.9.9.9"), 1, NameListing::No),
            Ok(())
        );
        assert!(check_addr(&block, ip("11.0.0.1"), 1, NameListing::No).is_err());
        // A catch-all block lists public addresses, not the special ones inside it: those
        // need an entry of their own class.
        for all in [
            pol(&["0.0.0.0/0", "::/0"], false),
            pol(&["0.0.0.0/1"], false),
        ] {
            assert_eq!(check_addr(&all, ip("8.8.8.8"), 80, NameListing::No), Ok(()));
            for special in ["127.0.0.1", "10.1.2.3", "::1"] {
                assert!(
                    check_addr(&all, ip(special), 80, NameListing::No).is_err(),
                    "{special}"
                );
            }
        }
        let all = pol(&["0.0.0.0/0"], false);
        assert!(check_addr(&all, ip("169.254.169.254"), 80, NameListing::No).is_err());
        let all_private = pol(&["0.0.0.0/0"], true);
        assert_eq!(
            check_addr(&all_private, ip("10.1.2.3"), 80, NameListing::No),
            Ok(())
        );
        let lo = pol(&["127.0.0.0/8", "169.254.0.0/16"], false);
        assert_eq!(
            check_addr(&lo, ip("127.3.2.1"), 80, NameListing::No),
            Ok(())
        );
        assert_eq!(
            check_addr(&lo, ip("169.254.169.254"), 80, NameListing::No),
            Ok(())
        );
        // Unspecified and multicast are never destinations, listed or not.
        let odd = pol(&["0.0.0.0", "224.0.0.0/4"], false);
        assert!(check_addr(&odd, ip("0.0.0.0"), 80, NameListing::No).is_err());
        assert!(check_addr(&odd, ip("224.0.0.1"), 80, NameListing::No).is_err());
    }

    #[test]
    fn an_exact_name_opens_its_addresses_but_a_pattern_does_not() {
        let p = pol(&["internal.example", "*.example.com"], false);
        assert_eq!(
            check_addr(&p, ip("10.0.0.5"), 443, NameListing::Exact),
            Ok(())
        );
        assert_eq!(
            check_addr(&p, ip("127.0.0.1"), 443, NameListing::Exact),
            Ok(())
        );
        assert_eq!(
            check_addr(&p, ip("93.184.216.34"), 443, NameListing::Pattern),
            Ok(())
        );
        // A name under a pattern that resolves to a special address (DNS rebinding) fails.
        for a in [
            "127.0.0.1",
            "169.254.169.254",
            "10.0.0.1",
            "::ffff:127.0.0.1",
        ] {
            assert!(
                check_addr(&p, ip(a), 443, NameListing::Pattern).is_err(),
                "{a}"
            );
        }
        let p = pol(&["*.example.com"], true);
        assert_eq!(
            check_addr(&p, ip("10.0.0.1"), 443, NameListing::Pattern),
            Ok(())
        );
        assert!(check_addr(&p, ip("127.0.0.1"), 443, NameListing::Pattern).is_err());
    }

    #[test]
    fn policy_round_trips_through_serde() {
        let p = pol(&["*.example.com:443", "10.0.0.0/8", "[::1]:80"], true);
        let v = serde_json::to_value(&p).expect("ser");
        assert_eq!(
            v,
            serde_json::json!({"allow": ["*.example.com:443", "10.0.0.0/8", "[::1]:80"],
                               "allow_private": true})
        );
        let back: EgressPolicy = serde_json::from_value(v).expect("de");
        assert_eq!(back, p);
    }
}
