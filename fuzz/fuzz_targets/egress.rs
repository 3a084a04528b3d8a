//! The egress allow list and the address guard: any entry text parses or is refused with a
//! sentence, never a panic; an accepted entry shows as text that parses back to the same
//! entry; every address gets a class, and an IPv6 form of an IPv4 address gets the IPv4
//! one's; multicast and unspecified addresses are never reached; a `*.` pattern never opens
//! loopback, link-local, documentation or reserved addresses, nor private ones without
//! `allow_private`; with a non-empty list an address no entry lists is refused.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::Arbitrary;
use idem_core::egress::{
    canonical, check_addr, classify_addr, embedded_v4, name_listing, name_may_pass, AddrClass,
    AllowEntry, EgressPolicy, HostPattern, NameListing,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    entries: Vec<&'a str>,
    allow_private: bool,
    v6: bool,
    addr: [u8; 16],
    port: u16,
    host: &'a str,
    url: &'a str,
}

fuzz_target!(|inp: Input<'_>| {
    let mut allow = Vec::new();
    for text in inp.entries.iter().take(8) {
        match AllowEntry::parse(text) {
            Ok(e) => {
                let shown = e.to_string();
                let again = AllowEntry::parse(&shown)
                    .unwrap_or_else(|err| panic!("{text:?} shows as {shown:?}, refused: {err}"));
                assert_eq!(again, e, "{text:?} shows as {shown:?}");
                assert_eq!(again.to_string(), shown);
                let json = serde_json::to_value(&e).expect("serializes");
                assert_eq!(
                    serde_json::from_value::<AllowEntry>(json).ok().as_ref(),
                    Some(&e)
                );
                if let HostPattern::Exact(n) | HostPattern::Suffix(n) = &e.pattern {
                    assert_eq!(*n, n.to_ascii_lowercase());
                    assert!(!n.ends_with('.'));
                }
                allow.push(e);
            }
            Err(err) => assert!(!err.0.is_empty()),
        }
    }
    let policy = EgressPolicy {
        allow,
        allow_private: inp.allow_private,
    };

    let ip = if inp.v6 {
        IpAddr::V6(Ipv6Addr::from(inp.addr))
    } else {
        IpAddr::V4(Ipv4Addr::new(
            inp.addr[0],
            inp.addr[1],
            inp.addr[2],
            inp.addr[3],
        ))
    };
    let class = classify_addr(ip);
    assert_eq!(canonical(canonical(ip)), canonical(ip));
    assert_eq!(classify_addr(canonical(ip)), class);
    if let IpAddr::V4(v4) = ip {
        // Every IPv6 form that carries it is judged as the IPv4 address.
        for v6 in [v4.to_ipv6_mapped(), v4.to_ipv6_compatible()] {
            if embedded_v4(v6).is_some() {
                assert_eq!(classify_addr(IpAddr::V6(v6)), class, "{v6}");
            }
        }
        let o = v4.octets();
        let nat64 = Ipv6Addr::new(
            0x64,
            0xff9b,
            0,
            0,
            0,
            0,
            u16::from_be_bytes([o[0], o[1]]),
            u16::from_be_bytes([o[2], o[3]]),
        );
        assert_eq!(classify_addr(IpAddr::V6(nat64)), class, "{nat64}");
        let six2four = Ipv6Addr::new(
            0x2002,
            u16::from_be_bytes([o[0], o[1]]),
            u16::from_be_bytes([o[2], o[3]]),
            0,
            0,
            0,
            0,
            1,
        );
        assert_eq!(classify_addr(IpAddr::V6(six2four)), class, "{six2four}");
    }

    let addr_listed = policy.allow.iter().any(|e| e.matches_addr(ip, inp.port));
    for listing in [NameListing::No, NameListing::Pattern, NameListing::Exact] {
        let r = check_addr(&policy, ip, inp.port, listing);
        if matches!(class, AddrClass::Multicast | AddrClass::Unspecified) {
            assert!(r.is_err(), "{ip} ({class:?}) passed");
        }
        let exact = addr_listed || listing == NameListing::Exact;
        if !exact {
            match class {
                AddrClass::Public | AddrClass::Multicast | AddrClass::Unspecified => {}
                AddrClass::Private | AddrClass::Cgnat => {
                    if !policy.allow_private {
                        assert!(
                            r.is_err(),
                            "{ip} passed without allow_private ({listing:?})"
                        );
                    }
                }
                _ => assert!(r.is_err(), "{ip} ({class:?}) passed through {listing:?}"),
            }
            if !policy.allow.is_empty() && listing == NameListing::No {
                assert!(r.is_err(), "{ip} not listed, passed");
            }
        }
        if r.is_ok() && class != AddrClass::Public {
            assert!(
                exact
                    || (policy.allow_private
                        && matches!(class, AddrClass::Private | AddrClass::Cgnat))
            );
        }
    }

    // Names: a listing is Exact only for an exact entry of that name and port, Pattern only
    // for a strictly longer name under a suffix entry.
    let listing = name_listing(&policy, inp.host, inp.port);
    let host = inp
        .host
        .strip_suffix('.')
        .unwrap_or(inp.host)
        .to_ascii_lowercase();
    let port_ok = |e: &AllowEntry| e.port.is_none_or(|p| p == inp.port);
    let exact = policy
        .allow
        .iter()
        .any(|e| port_ok(e) && e.pattern == HostPattern::Exact(host.clone()));
    let pattern = policy.allow.iter().any(|e| {
        port_ok(e)
            && matches!(&e.pattern, HostPattern::Suffix(s) if host.ends_with(s.as_str()) && host.len() > s.len())
    });
    let want = if exact {
        NameListing::Exact
    } else if pattern {
        NameListing::Pattern
    } else {
        NameListing::No
    };
    assert_eq!(listing, want, "{:?}", inp.host);
    if listing != NameListing::No {
        assert!(name_may_pass(&policy, inp.host, inp.port));
    }

    // A URL's host as the egress client sees it: an IP literal is judged as an address.
    if let Ok(u) = url::Url::parse(inp.url) {
        if let Some(url::Host::Ipv4(a)) = u.host() {
            let r = check_addr(
                &policy,
                IpAddr::V4(a),
                u.port_or_known_default().unwrap_or(0),
                NameListing::No,
            );
            if matches!(
                classify_addr(IpAddr::V4(a)),
                AddrClass::Loopback | AddrClass::LinkLocal
            ) && !policy
                .allow
                .iter()
                .any(|e| e.matches_addr(IpAddr::V4(a), u.port_or_known_default().unwrap_or(0)))
            {
                assert!(r.is_err(), "{} reached", inp.url);
            }
        }
    }
});
