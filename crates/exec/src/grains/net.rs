//! Network grains: host names, interfaces and addresses, DNS, default gateways.
//!
//! Interfaces come from `getifaddrs` rather than Salt's parse of `ip addr show`; the
//! results agree except that secondary IPv4 addresses keep kernel order in
//! `ip_interfaces` (Salt lists them after the IPv6 addresses) and tunnel link
//! addresses are shown as hex bytes (Salt shows `ip`'s dotted form).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rmpv::Value;

use super::{run_all, Grains};
use crate::modules::which;
use crate::os::Interface;

/// `default_gateway()`: `ip_gw`, `ip4_gw`, `ip6_gw` from `ip -4/-6 route show`, when
/// `ip` exists.
pub(super) fn default_gateway() -> Grains {
    let mut g = Grains::default();
    let Some(ip) = which("ip") else {
        return g;
    };
    g.set("ip_gw", Value::Boolean(false));
    g.set("ip4_gw", Value::Boolean(false));
    g.set("ip6_gw", Value::Boolean(false));
    for version in ["4", "6"] {
        let Some((_, out, _)) = run_all(&[&ip, &format!("-{version}"), "route", "show"]) else {
            continue;
        };
        if let Some(line) = out.lines().find(|l| l.starts_with("default")) {
            g.set("ip_gw", Value::Boolean(true));
            let words: Vec<&str> = line.split_whitespace().collect();
            let key = format!("ip{version}_gw");
            match words.get(1..3) {
                Some(["via", gw]) => g.set(&key, *gw),
                _ => g.set(&key, Value::Boolean(true)),
            }
        }
    }
    g
}

/// `dns()`: `salt.utils.dns.parse_resolv` of systemd-resolved's file if present,
/// else `/etc/resolv.conf`; `None` if unreadable.
pub(super) fn dns() -> Option<Value> {
    let path = if std::path::Path::new("/run/systemd/resolve/resolv.conf").exists() {
        "/run/systemd/resolve/resolv.conf"
    } else {
        "/etc/resolv.conf"
    };
    let raw = std::fs::read(path).ok()?;
    Some(parse_resolv(&String::from_utf8_lossy(&raw)))
}

/// An address as Python's `ipaddress.ip_address` reads it (IPv6 may carry `%scope`).
fn parse_ip(text: &str) -> Option<(IpAddr, String)> {
    let (addr, scope) = match text.split_once('%') {
        Some((a, s)) => (a, Some(s)),
        None => (text, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let shown = match (ip, scope) {
        (IpAddr::V6(_), Some(scope)) if !scope.is_empty() => format!("{ip}%{scope}"),
        (_, Some(_)) => return None,
        _ => ip.to_string(),
    };
    Some((ip, shown))
}

/// `parse_resolv`.
pub(super) fn parse_resolv(text: &str) -> Value {
    let mut nameservers: Vec<String> = Vec::new();
    let mut ip4: Vec<String> = Vec::new();
    let mut ip6: Vec<String> = Vec::new();
    let mut search: Vec<String> = Vec::new();
    let mut sortlist: Vec<String> = Vec::new();
    let mut domain = String::new();
    let mut options: Vec<String> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((directive, args)) = words.split_first() else {
            continue;
        };
        let args: Vec<&str> = args
            .iter()
            .take_while(|a| !a.starts_with(['#', ';']))
            .copied()
            .collect();
        match directive.to_lowercase().as_str() {
            "nameserver" => {
                let Some((ip, shown)) = args.first().and_then(|a| parse_ip(a)) else {
                    continue;
                };
                if !nameservers.contains(&shown) {
                    nameservers.push(shown.clone());
                }
                let list = if ip.is_ipv4() { &mut ip4 } else { &mut ip6 };
                if !list.contains(&shown) {
                    list.push(shown);
                }
            }
            "domain" => {
                if let Some(d) = args.first() {
                    domain = (*d).to_owned();
                }
            }
            "search" => search = args.iter().map(|s| (*s).to_owned()).collect(),
            "sortlist" => {
                for raw in &args {
                    if let Some(net) = sortlist_net(raw) {
                        if !sortlist.contains(&net) {
                            sortlist.push(net);
                        }
                    }
                }
            }
            "options" => {
                if let Some(opt) = args.first() {
                    if !options.iter().any(|o| o == opt) {
                        options.push((*opt).to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    let list = |items: Vec<String>| Value::Array(items.into_iter().map(Value::from).collect());
    Value::Map(vec![
        (Value::from("nameservers"), list(nameservers)),
        (Value::from("ip4_nameservers"), list(ip4)),
        (Value::from("ip6_nameservers"), list(ip6)),
        (Value::from("sortlist"), list(sortlist)),
        (Value::from("domain"), Value::from(domain)),
        (Value::from("search"), list(search)),
        (Value::from("options"), list(options)),
    ])
}

/// A `sortlist` entry as `ipaddress.ip_network(...).with_netmask` (IPv4 only; a
/// missing mask is the address's "natural" class mask; host bits must be clear).
fn sortlist_net(raw: &str) -> Option<String> {
    let (addr, mask) = match raw.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (raw, None),
    };
    let ip: Ipv4Addr = addr.parse().ok()?;
    let prefix: u32 = match mask {
        Some(m) => match m.parse::<u32>() {
            Ok(p) if p <= 32 => p,
            Ok(_) => return None,
            Err(_) => {
                let bits = u32::from(m.parse::<Ipv4Addr>().ok()?);
                if bits.leading_ones() + bits.trailing_zeros() != 32 {
                    return None;
                }
                bits.leading_ones()
            }
        },
        None => match ip.octets()[0] {
            o if o >= 192 => 24,
            o if o >= 128 => 16,
            _ => 8,
        },
    };
    let netmask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    let network = u32::from(ip) & netmask;
    if mask.is_some() && network != u32::from(ip) {
        return None;
    }
    Some(format!(
        "{}/{}",
        Ipv4Addr::from(network),
        Ipv4Addr::from(netmask)
    ))
}

/// `fqdns()`: the names the non-loopback addresses reverse-resolve to, sorted.
pub(super) fn fqdns(ifaces: &[Interface]) -> Value {
    let addrs: Vec<IpAddr> = sorted_v4(ifaces, false)
        .into_iter()
        .map(IpAddr::V4)
        .chain(sorted_v6(ifaces, false).into_iter().map(IpAddr::V6))
        .collect();
    // Eight lookups at a time, as Salt's thread pool does.
    let mut names: Vec<String> = Vec::new();
    for chunk in addrs.chunks(8) {
        let handles: Vec<_> = chunk
            .iter()
            .map(|&ip| std::thread::spawn(move || crate::os::reverse_lookup(ip)))
            .collect();
        names.extend(handles.into_iter().filter_map(|h| h.join().ok().flatten()));
    }
    names.sort();
    names.dedup();
    Value::Array(names.into_iter().map(Value::from).collect())
}

/// `hostname()`: `localhost`, `fqdn`, `host`, `domain`; returns the FQDN.
pub(super) fn hostname_grains(g: &mut Grains) -> String {
    let localhost = halite_config::hostname().unwrap_or_default();
    let fqdn = crate::os::canonical_name(&localhost)
        .or_else(|| (!localhost.is_empty()).then(|| localhost.clone()))
        .unwrap_or_else(|| "localhost.localdomain".to_owned());
    let (host, domain) = fqdn.split_once('.').unwrap_or((fqdn.as_str(), ""));
    g.set("localhost", localhost.as_str());
    g.set("fqdn", fqdn.as_str());
    g.set("host", host);
    g.set("domain", domain);
    fqdn
}

fn sorted_v4(ifaces: &[Interface], loopback: bool) -> Vec<Ipv4Addr> {
    let mut all: Vec<Ipv4Addr> = ifaces
        .iter()
        .flat_map(|i| i.inet.iter().copied())
        .filter(|a| loopback || !a.is_loopback())
        .collect();
    all.sort();
    all.dedup();
    all
}

fn sorted_v6(ifaces: &[Interface], loopback: bool) -> Vec<Ipv6Addr> {
    let mut all: Vec<Ipv6Addr> = ifaces
        .iter()
        .flat_map(|i| i.inet6.iter().copied())
        .filter(|a| loopback || !a.is_loopback())
        .collect();
    all.sort();
    all.dedup();
    all
}

/// `hwaddr_interfaces`, `ip4_interfaces`, `ip6_interfaces`, `ipv4`, `ipv6`,
/// `fqdn_ip4`, `fqdn_ip6`, `ip_interfaces`, in Salt's order.
pub(super) fn interface_grains(g: &mut Grains, ifaces: &[Interface], fqdn: &str) {
    let strings = |items: Vec<String>| Value::Array(items.into_iter().map(Value::from).collect());
    let per_iface = |f: &dyn Fn(&Interface) -> Vec<String>| {
        Value::Map(
            ifaces
                .iter()
                .map(|i| (Value::from(i.name.as_str()), strings(f(i))))
                .collect(),
        )
    };
    g.set(
        "hwaddr_interfaces",
        Value::Map(
            ifaces
                .iter()
                .filter_map(|i| {
                    i.hwaddr
                        .as_ref()
                        .map(|h| (Value::from(i.name.as_str()), Value::from(h.as_str())))
                })
                .collect(),
        ),
    );
    g.set(
        "ip4_interfaces",
        per_iface(&|i| i.inet.iter().map(ToString::to_string).collect()),
    );
    g.set(
        "ip6_interfaces",
        per_iface(&|i| i.inet6.iter().map(ToString::to_string).collect()),
    );
    let v4 = sorted_v4(ifaces, true);
    let v6 = sorted_v6(ifaces, true);
    let fqdn_ip4 = if v4.is_empty() {
        Vec::new()
    } else {
        crate::os::resolve(fqdn, false)
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let fqdn_ip6 = if v6.is_empty() {
        Vec::new()
    } else {
        crate::os::resolve(fqdn, true)
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    g.set(
        "ipv4",
        strings(v4.iter().map(ToString::to_string).collect()),
    );
    g.set(
        "ipv6",
        strings(v6.iter().map(ToString::to_string).collect()),
    );
    g.set("fqdn_ip4", strings(fqdn_ip4));
    g.set("fqdn_ip6", strings(fqdn_ip6));
    g.set(
        "ip_interfaces",
        per_iface(&|i| {
            i.inet
                .iter()
                .map(ToString::to_string)
                .chain(i.inet6.iter().map(ToString::to_string))
                .collect()
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_parses_like_salt() {
        let text = "# comment\nnameserver 10.0.0.1\nnameserver fe80::1%eth0 ; x\nnameserver 10.0.0.1\nnameserver bogus\nsearch a.example b.example # c\noptions ndots:2\noptions ndots:2\nsortlist 130.155.160.0/255.255.240.0 130.155.0.0 10.1.1.1/8\n";
        let v = parse_resolv(text);
        let get = |k: &str| crate::pyval::py_str(halite_proto::value::get(&v, k).expect("key"));
        assert_eq!(get("nameservers"), "['10.0.0.1', 'fe80::1%eth0']");
        assert_eq!(get("ip4_nameservers"), "['10.0.0.1']");
        assert_eq!(get("ip6_nameservers"), "['fe80::1%eth0']");
        assert_eq!(get("search"), "['a.example', 'b.example']");
        assert_eq!(get("options"), "['ndots:2']");
        assert_eq!(
            get("sortlist"),
            "['130.155.160.0/255.255.240.0', '130.155.0.0/255.255.0.0']"
        );
        assert_eq!(get("domain"), "");
    }

    #[test]
    fn interface_grains_list_addresses_per_interface() {
        let ifaces = vec![
            Interface {
                name: "lo".into(),
                hwaddr: Some("00:00:00:00:00:00".into()),
                inet: vec![Ipv4Addr::LOCALHOST],
                inet6: vec![Ipv6Addr::LOCALHOST],
            },
            Interface {
                name: "eth0".into(),
                hwaddr: Some("02:fc:00:00:00:01".into()),
                inet: vec!["192.0.2.2".parse().expect("ip")],
                inet6: vec!["fd00::2".parse().expect("ip")],
            },
        ];
        let mut g = Grains::default();
        interface_grains(&mut g, &ifaces, "localhost");
        let get = |k: &str| crate::pyval::py_str(g.get(k).expect("key"));
        assert_eq!(get("ipv4"), "['127.0.0.1', '192.0.2.2']");
        assert_eq!(get("ipv6"), "['::1', 'fd00::2']");
        assert_eq!(
            get("ip_interfaces"),
            "{'lo': ['127.0.0.1', '::1'], 'eth0': ['192.0.2.2', 'fd00::2']}"
        );
        assert_eq!(
            get("hwaddr_interfaces"),
            "{'lo': '00:00:00:00:00:00', 'eth0': '02:fc:00:00:00:01'}"
        );
    }
}
