//! `S@` / `ipcidr` targeting with the parsing rules of Python's `ipaddress` module.
//!
//! The target is tried as an address first (`ipaddress.ip_address`), then as a network
//! (`ipaddress.ip_network`, strict: host bits set is an error). An address matches when its
//! string form is `in` the minion's `ipv4`/`ipv6` grain (list membership, or substring
//! when the grain is a string). A network matches when any grain address lies inside it
//! (`salt.utils.network.in_subnet`); an unparsable grain address is an error there, as in
//! Salt, which the callers turn into "no match".
//!
//! Parsing follows CPython 3.11: IPv4 is exactly four decimal octets without leading zeros;
//! IPv6 allows one `::`, an embedded IPv4 tail and a `%scope` suffix (kept in the string
//! form, ignored for containment); an IPv4 mask may be a prefix length, a netmask or a
//! hostmask, an IPv6 mask only a prefix length. Integers are addresses (below 2^32 IPv4).

use std::fmt::Write as _;

use rmpv::Value;

use crate::pyvalue;

/// A parsed `ipcidr` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IpTarget {
    Address(Addr),
    Network(Network),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addr {
    v6: bool,
    ip: u128,
    scope: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Network {
    v6: bool,
    network: u128,
    prefix: u32,
}

/// The grains made Salt's matcher raise (an unparsable address in `in_subnet`, or an
/// `in` test against a value that is not a container); Salt's callers turn the exception
/// into "no match" on the minion and into an empty result on the master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrainsRaised;

impl IpTarget {
    /// `ip_address(tgt)`, else `ip_network(tgt)`; `None` is "Invalid IP/CIDR target".
    pub(crate) fn parse(tgt: &Value) -> Option<Self> {
        if let Some(n) = int_value(tgt) {
            return addr_from_int(n).map(IpTarget::Address);
        }
        let s = pyvalue::text(tgt)?;
        if let Some(addr) = parse_address(s) {
            return Some(IpTarget::Address(addr));
        }
        parse_network(s).map(IpTarget::Network)
    }

    /// The grain this target reads: `ipv4` or `ipv6`.
    pub(crate) fn proto(&self) -> &'static str {
        let v6 = match self {
            IpTarget::Address(a) => a.v6,
            IpTarget::Network(n) => n.v6,
        };
        if v6 {
            "ipv6"
        } else {
            "ipv4"
        }
    }

    /// Whether a minion with these grains matches (Salt's `ipcidr_match.match` body after
    /// the target parsed). Grains that are not a dict never match.
    pub(crate) fn matches_grains(&self, grains: &Value) -> Result<bool, GrainsRaised> {
        let Value::Map(entries) = grains else {
            return Ok(false);
        };
        let Some(addrs) = pyvalue::dict_get(entries, self.proto()) else {
            return Ok(false);
        };
        match self {
            IpTarget::Address(addr) => contains_str(addrs, &addr.to_string()),
            IpTarget::Network(net) => in_subnet(net, addrs),
        }
    }
}

/// Python `needle in container` for a `str` needle; anything but a list, dict or str
/// raises `TypeError`.
fn contains_str(container: &Value, needle: &str) -> Result<bool, GrainsRaised> {
    match container {
        Value::Array(items) => Ok(items.iter().any(|i| pyvalue::text(i) == Some(needle))),
        Value::Map(entries) => Ok(pyvalue::dict_get(entries, needle).is_some()),
        other => pyvalue::text(other)
            .map(|s| s.contains(needle))
            .ok_or(GrainsRaised),
    }
}

/// `salt.utils.network.in_subnet(net, addrs)`: any address inside; stops at the first hit
/// and fails on the first unparsable address before one.
fn in_subnet(net: &Network, addrs: &Value) -> Result<bool, GrainsRaised> {
    let single = std::slice::from_ref(addrs);
    let items = match addrs {
        Value::Array(items) => items.as_slice(),
        _ => single,
    };
    for item in items {
        let addr = match int_value(item) {
            Some(n) => addr_from_int(n),
            None => pyvalue::text(item).and_then(parse_address),
        }
        .ok_or(GrainsRaised)?;
        if addr.v6 == net.v6 && addr.ip & net.mask() == net.network {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The value as a Python `int` (booleans are ints).
fn int_value(v: &Value) -> Option<i128> {
    match v {
        Value::Boolean(b) => Some(i128::from(*b)),
        Value::Integer(i) => i
            .as_i64()
            .map(i128::from)
            .or_else(|| i.as_u64().map(i128::from)),
        _ => None,
    }
}

fn addr_from_int(n: i128) -> Option<Addr> {
    let ip = u128::try_from(n).ok()?;
    Some(Addr {
        v6: ip > u128::from(u32::MAX),
        ip,
        scope: None,
    })
}

impl Network {
    fn mask(&self) -> u128 {
        let all = if self.v6 {
            u128::MAX
        } else {
            u128::from(u32::MAX)
        };
        all & !all.checked_shr(self.prefix).unwrap_or(0)
    }
}

impl std::fmt::Display for Addr {
    /// Python `str(address)`: dotted quad, or compressed IPv6 with `%scope`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.v6 {
            let b = (self.ip as u32).to_be_bytes();
            return write!(f, "{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
        }
        let hextets: Vec<u16> = (0..8).map(|i| (self.ip >> (112 - 16 * i)) as u16).collect();
        // The longest run of zero hextets (first one on ties), compressed if longer than 1.
        let (mut best_start, mut best_len, mut run_start, mut run_len) = (0, 0, 0, 0);
        for (i, &h) in hextets.iter().enumerate() {
            if h == 0 {
                if run_len == 0 {
                    run_start = i;
                }
                run_len += 1;
                if run_len > best_len {
                    best_len = run_len;
                    best_start = run_start;
                }
            } else {
                run_len = 0;
            }
        }
        let mut out = String::new();
        let hex = |out: &mut String, hs: &[u16]| {
            for (n, h) in hs.iter().enumerate() {
                if n > 0 {
                    out.push(':');
                }
                let _ = write!(out, "{h:x}");
            }
        };
        if best_len > 1 {
            hex(&mut out, &hextets[..best_start]);
            out.push_str("::");
            hex(&mut out, &hextets[best_start + best_len..]);
        } else {
            hex(&mut out, &hextets);
        }
        f.write_str(&out)?;
        match &self.scope {
            Some(scope) => write!(f, "%{scope}"),
            None => Ok(()),
        }
    }
}

/// `ipaddress.ip_address(s)`.
fn parse_address(s: &str) -> Option<Addr> {
    if s.contains('/') {
        return None;
    }
    if let Some(ip) = parse_v4(s) {
        return Some(Addr {
            v6: false,
            ip: u128::from(ip),
            scope: None,
        });
    }
    let (addr, scope) = split_scope(s)?;
    Some(Addr {
        v6: true,
        ip: parse_v6(addr)?,
        scope,
    })
}

/// `ipaddress.ip_network(s)` (strict).
fn parse_network(s: &str) -> Option<Network> {
    let parts: Vec<&str> = s.split('/').collect();
    if parts.len() > 2 {
        return None;
    }
    let mask = parts.get(1).copied();
    // IPv4Network first: any address or mask error falls through to IPv6; host bits set
    // is a plain ValueError that ends the attempt.
    if let Some(ip) = parse_v4(parts[0]) {
        let prefix = match mask {
            None => Some(32),
            Some(m) => prefix_from_string(m, 32).or_else(|| v4_mask_prefix(m)),
        };
        if let Some(prefix) = prefix {
            let net = Network {
                v6: false,
                network: u128::from(ip),
                prefix,
            };
            return (net.network & net.mask() == net.network).then_some(net);
        }
    }
    let (addr, _scope) = split_scope(parts[0])?;
    let ip = parse_v6(addr)?;
    let prefix = match mask {
        None => 128,
        Some(m) => prefix_from_string(m, 128)?,
    };
    let net = Network {
        v6: true,
        network: ip,
        prefix,
    };
    (net.network & net.mask() == net.network).then_some(net)
}

/// `_prefix_from_prefix_string`: ASCII digits only, within `0..=max`.
fn prefix_from_string(m: &str, max: u32) -> Option<u32> {
    if m.is_empty() || !m.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = m.trim_start_matches('0');
    if significant.len() > 3 {
        return None;
    }
    let n: u32 = if significant.is_empty() {
        0
    } else {
        significant.parse().ok()?
    };
    (n <= max).then_some(n)
}

/// `_prefix_from_ip_string`: a netmask (`255.255.0.0`), else a hostmask (`0.0.255.255`).
fn v4_mask_prefix(m: &str) -> Option<u32> {
    let ip = parse_v4(m)?;
    let from_netmask = |v: u32| {
        let prefix = v.leading_ones();
        (v.checked_shl(prefix).unwrap_or(0) == 0).then_some(prefix)
    };
    from_netmask(ip).or_else(|| from_netmask(!ip))
}

fn parse_v4(s: &str) -> Option<u32> {
    let octets: Vec<&str> = s.split('.').collect();
    if octets.len() != 4 {
        return None;
    }
    let mut ip = 0u32;
    for octet in octets {
        if octet.is_empty() || octet.len() > 3 || !octet.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if octet != "0" && octet.starts_with('0') {
            return None;
        }
        let value: u32 = octet.parse().ok()?;
        if value > 255 {
            return None;
        }
        ip = ip << 8 | value;
    }
    Some(ip)
}

/// `_split_scope_id`.
fn split_scope(s: &str) -> Option<(&str, Option<String>)> {
    match s.split_once('%') {
        None => Some((s, None)),
        Some((_, scope)) if scope.is_empty() || scope.contains('%') => None,
        Some((addr, scope)) => Some((addr, Some(scope.to_owned()))),
    }
}

/// `IPv6Address._ip_int_from_string`.
fn parse_v6(s: &str) -> Option<u128> {
    if s.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = s.split(':').map(str::to_owned).collect();
    if parts.len() < 3 {
        return None;
    }
    if parts.last().is_some_and(|p| p.contains('.')) {
        let v4 = parse_v4(&parts.pop()?)?;
        parts.push(format!("{:x}", v4 >> 16));
        parts.push(format!("{:x}", v4 & 0xffff));
    }
    if parts.len() > 9 {
        return None;
    }
    let mut skip: Option<usize> = None;
    for (i, part) in parts.iter().enumerate().take(parts.len() - 1).skip(1) {
        if part.is_empty() {
            if skip.is_some() {
                return None;
            }
            skip = Some(i);
        }
    }
    let (hi, lo, skipped) = match skip {
        Some(i) => {
            let mut hi = i;
            let mut lo = parts.len() - i - 1;
            if parts[0].is_empty() {
                hi -= 1;
                if hi > 0 {
                    return None;
                }
            }
            if parts[parts.len() - 1].is_empty() {
                lo -= 1;
                if lo > 0 {
                    return None;
                }
            }
            let skipped = 8usize.checked_sub(hi + lo)?;
            if skipped < 1 {
                return None;
            }
            (hi, lo, skipped)
        }
        None => {
            if parts.len() != 8 || parts[0].is_empty() || parts[7].is_empty() {
                return None;
            }
            (8, 0, 0)
        }
    };
    let hextet = |p: &str| -> Option<u128> {
        if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(p, 16).ok()
    };
    let mut ip: u128 = 0;
    for part in &parts[..hi] {
        ip = ip << 16 | hextet(part)?;
    }
    ip = ip
        .checked_shl(16 * u32::try_from(skipped).ok()?)
        .unwrap_or(0);
    for part in &parts[parts.len() - lo..] {
        ip = ip << 16 | hextet(part)?;
    }
    Some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::json;

    /// `(target, what ip_address()/ip_network() make of it)`, from CPython 3.11.7.
    const IP_CASES: &[(&str, &str)] = &[
        ("10.0.0.1", "addr 10.0.0.1"),
        ("10.0.0.0/24", "net 10.0.0.0/24"),
        ("10.0.0.1/24", "invalid"),
        ("010.0.0.1", "invalid"),
        ("1.2.3", "invalid"),
        ("256.1.1.1", "invalid"),
        ("1.2.3.4/32", "net 1.2.3.4/32"),
        ("1.2.3.4/33", "invalid"),
        ("10.0.0.0/255.255.255.0", "net 10.0.0.0/24"),
        ("10.0.0.0/0.0.0.255", "net 10.0.0.0/24"),
        ("10.0.0.0/255.0.255.0", "invalid"),
        ("0.0.0.0/0", "net 0.0.0.0/0"),
        ("10.0.0.0/024", "net 10.0.0.0/24"),
        ("10.0.0.0/+24", "invalid"),
        ("::1", "addr ::1"),
        ("::", "addr ::"),
        ("1::", "addr 1::"),
        ("::ffff:1.2.3.4", "addr ::ffff:102:304"),
        ("2001:db8::/32", "net 2001:db8::/32"),
        ("2001:db8::1/32", "invalid"),
        ("fe80::1%eth0", "addr fe80::1%eth0"),
        ("fe80::%eth0/64", "net fe80::%eth0/64"),
        ("1:0:0:0:0:0:0:8", "addr 1::8"),
        ("1:0:2:0:0:3:0:4", "addr 1:0:2::3:0:4"),
        ("0:0:0:0:0:0:0:0", "addr ::"),
        ("1:2:3:4:5:6:7:8", "addr 1:2:3:4:5:6:7:8"),
        ("1:2:3:4:5:6:7::", "addr 1:2:3:4:5:6:7:0"),
        ("::2:3:4:5:6:7:8", "addr 0:2:3:4:5:6:7:8"),
        ("1::2::3", "invalid"),
        (":1::2", "invalid"),
        ("1:2:3:4:5:6:7:8:9", "invalid"),
        ("12345::", "invalid"),
        ("2001:DB8::A", "addr 2001:db8::a"),
        ("fe80::1%", "invalid"),
        ("1.2.3.4/24/1", "invalid"),
        ("", "invalid"),
        ("web1", "invalid"),
        ("1.2.3.4 ", "invalid"),
        ("::/0", "net ::/0"),
        ("::/129", "invalid"),
        ("2001:db8::/255.255.0.0", "invalid"),
    ];

    fn describe(t: Option<IpTarget>) -> String {
        match t {
            None => "invalid".to_owned(),
            Some(IpTarget::Address(a)) => format!("addr {a}"),
            Some(IpTarget::Network(n)) => {
                let addr = Addr {
                    v6: n.v6,
                    ip: n.network,
                    scope: None,
                };
                format!("net {addr}/{}", n.prefix)
            }
        }
    }

    #[test]
    fn parses_and_prints_like_python_ipaddress() {
        for &(input, want) in IP_CASES {
            // The network's scope id is printed by Python but irrelevant to containment.
            let want = match (want.find('%'), want.rfind('/')) {
                (Some(pct), Some(slash)) if want.starts_with("net") => {
                    format!("{}{}", &want[..pct], &want[slash..])
                }
                _ => want.to_owned(),
            };
            assert_eq!(
                describe(IpTarget::parse(&Value::from(input))),
                want,
                "{input:?}"
            );
        }
    }

    #[test]
    fn integers_are_addresses() {
        assert_eq!(
            describe(IpTarget::parse(&Value::from(167_772_161))),
            "addr 10.0.0.1"
        );
        assert_eq!(describe(IpTarget::parse(&Value::from(-1))), "invalid");
    }

    fn matches(target: &str, grains: &str) -> Result<bool, GrainsRaised> {
        IpTarget::parse(&Value::from(target))
            .expect("valid target")
            .matches_grains(&json(grains))
    }

    #[test]
    fn address_is_a_list_membership_test() {
        assert_eq!(matches("10.0.0.1", r#"{"ipv4": ["10.0.0.1"]}"#), Ok(true));
        assert_eq!(matches("10.0.0.1", r#"{"ipv4": ["10.0.0.10"]}"#), Ok(false));
    }

    #[test]
    fn address_in_a_string_grain_is_a_substring_test() {
        assert_eq!(matches("10.0.0.1", r#"{"ipv4": "10.0.0.12"}"#), Ok(true));
    }

    #[test]
    fn network_contains_grain_addresses() {
        assert_eq!(
            matches("10.0.0.0/24", r#"{"ipv4": ["127.0.0.1", "10.0.0.7"]}"#),
            Ok(true)
        );
        assert_eq!(
            matches("10.0.0.0/24", r#"{"ipv4": ["10.0.1.7"]}"#),
            Ok(false)
        );
        assert_eq!(matches("::/0", r#"{"ipv6": ["fe80::1%eth0"]}"#), Ok(true));
    }

    #[test]
    fn missing_protocol_grain_does_not_match() {
        assert_eq!(
            matches("2001:db8::/32", r#"{"ipv4": ["10.0.0.1"]}"#),
            Ok(false)
        );
    }

    #[test]
    fn unparsable_grain_address_raises_like_in_subnet() {
        assert_eq!(
            matches("10.0.0.0/8", r#"{"ipv4": ["bogus"]}"#),
            Err(GrainsRaised)
        );
        // `any()` stops at the first hit before reaching the bad entry.
        assert_eq!(
            matches("10.0.0.0/8", r#"{"ipv4": ["10.1.1.1", "bogus"]}"#),
            Ok(true)
        );
    }
}
