//! The distribution grains (`os`, `os_family`, `osfullname`, `osrelease`,
//! `oscodename`, `lsb_distrib_*`, `osrelease_info`, `osmajorrelease`, `osfinger`) as
//! `_linux_distribution_data` computes them when the `lsb_release` Python module is
//! missing (as in Salt's onedir and pip installs): os-release first, then the legacy
//! path that fills `lsb_distrib_*` from `/etc/lsb-release` or os-release.

use std::collections::BTreeMap;

use rmpv::Value;

use super::Grains;

/// `_OS_NAME_MAP`: the first ten characters of a shortened `osfullname` to `os`.
const OS_NAME_MAP: &[(&str, &str)] = &[
    ("redhatente", "RedHat"),
    ("gentoobase", "Gentoo"),
    ("archarm", "Arch ARM"),
    ("arch", "Arch"),
    ("debian", "Debian"),
    ("Junos", "Junos"),
    ("raspbian", "Raspbian"),
    ("fedoraremi", "Fedora"),
    ("chapeau", "Chapeau"),
    ("korora", "Korora"),
    ("amazonami", "Amazon"),
    ("alt", "ALT"),
    ("enterprise", "OEL"),
    ("oracleserv", "OEL"),
    ("cloudserve", "CloudLinux"),
    ("cloudlinux", "CloudLinux"),
    ("virtuozzo", "Virtuozzo"),
    ("almalinux", "AlmaLinux"),
    ("almalinuxk", "AlmaLinux"),
    ("pidora", "Fedora"),
    ("scientific", "ScientificLinux"),
    ("synology", "Synology"),
    ("nilrt", "NILinuxRT"),
    ("poky", "Poky"),
    ("manjaro", "Manjaro"),
    ("manjarolin", "Manjaro"),
    ("univention", "Univention"),
    ("antergos", "Antergos"),
    ("sles", "SUSE"),
    ("void", "Void"),
    ("slesexpand", "RES"),
    ("linuxmint", "Mint"),
    ("neon", "KDE neon"),
    ("pop", "Pop"),
    ("rocky", "Rocky"),
    ("alibabaclo", "Alinux"),
    ("mendel", "Mendel"),
    ("photon", "VMware Photon OS"),
];

/// `_ID_AND_NAME_TO_OS_NAME_MAP`.
const ID_AND_NAME_MAP: &[(&str, &str, &str)] = &[
    ("astra", "Astra Linux (Orel)", "AstraLinuxCE"),
    ("astra", "Astra Linux (Smolensk)", "AstraLinuxSE"),
    ("pop", "Pop!_OS", "Pop"),
];

/// `_OS_FAMILY_MAP`: `os` to `os_family` (default: the `os` itself).
const OS_FAMILY_MAP: &[(&str, &str)] = &[
    ("Ubuntu", "Debian"),
    ("Fedora", "RedHat"),
    ("Chapeau", "RedHat"),
    ("Korora", "RedHat"),
    ("FedBerry", "RedHat"),
    ("CentOS", "RedHat"),
    ("CentOS Stream", "RedHat"),
    ("GoOSe", "RedHat"),
    ("Scientific", "RedHat"),
    ("Amazon", "RedHat"),
    ("CloudLinux", "RedHat"),
    ("Virtuozzo", "RedHat"),
    ("AlmaLinux", "RedHat"),
    ("AlmaLinux Kitten", "RedHat"),
    ("OVS", "RedHat"),
    ("OEL", "RedHat"),
    ("XCP", "RedHat"),
    ("XCP-ng", "RedHat"),
    ("XenServer", "RedHat"),
    ("RES", "RedHat"),
    ("Sangoma", "RedHat"),
    ("VMware Photon OS", "RedHat"),
    ("Mandrake", "Mandriva"),
    ("Mint", "Debian"),
    ("VMwareESX", "VMware"),
    ("Bluewhite64", "Bluewhite"),
    ("Slamd64", "Slackware"),
    ("SLES", "Suse"),
    ("SUSE Enterprise Server", "Suse"),
    ("SUSE  Enterprise Server", "Suse"),
    ("SLED", "Suse"),
    ("openSUSE", "Suse"),
    ("SUSE", "Suse"),
    ("openSUSE Leap", "Suse"),
    ("openSUSE Tumbleweed", "Suse"),
    ("SLES_SAP", "Suse"),
    ("alfaLinux", "Suse"),
    ("alfaLinux Rise", "Suse"),
    ("AlterOS", "RedHat"),
    ("RED OS", "RedHat"),
    ("Arch ARM", "Arch"),
    ("Manjaro", "Arch"),
    ("Manjaro ARM", "Arch"),
    ("Antergos", "Arch"),
    ("EndeavourOS", "Arch"),
    ("ALT", "RedHat"),
    ("Trisquel", "Debian"),
    ("GCEL", "Debian"),
    ("Linaro", "Debian"),
    ("elementary OS", "Debian"),
    ("elementary", "Debian"),
    ("Univention", "Debian"),
    ("ScientificLinux", "RedHat"),
    ("Raspbian", "Debian"),
    ("Devuan", "Debian"),
    ("antiX", "Debian"),
    ("Kali", "Debian"),
    ("Parrot OS", "Debian"),
    ("neon", "Debian"),
    ("Cumulus", "Debian"),
    ("Deepin", "Debian"),
    ("NILinuxRT", "NILinuxRT"),
    ("KDE neon", "Debian"),
    ("Void", "Void"),
    ("IDMS", "Debian"),
    ("Funtoo", "Gentoo"),
    ("TurnKey", "Debian"),
    ("Pop", "Debian"),
    ("Rocky", "RedHat"),
    ("AstraLinuxCE", "Debian"),
    ("AstraLinuxSE", "Debian"),
    ("Alinux", "RedHat"),
    ("Mendel", "Debian"),
    ("OSMC", "Debian"),
    ("openEuler", "RedHat"),
];

fn lookup<'a>(table: &'a [(&str, &str)], key: &str) -> Option<&'a str> {
    table.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// Python's `platform.freedesktop_os_release()`: `/etc/os-release`, else
/// `/usr/lib/os-release`; empty if neither can be read.
pub(crate) fn os_release() -> BTreeMap<String, String> {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .map(|raw| parse_os_release(&String::from_utf8_lossy(&raw)))
        .unwrap_or_default()
}

/// Parses os-release text with Python's regex
/// `^(?P<name>[a-zA-Z0-9_]+)=(?P<quote>["']?)(?P<value>.*)(?P=quote)$` and its
/// unescaping, over the defaults `NAME=Linux`, `ID=linux`, `PRETTY_NAME=Linux`.
fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> =
        [("NAME", "Linux"), ("ID", "linux"), ("PRETTY_NAME", "Linux")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once('=') else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = match rest.chars().next() {
            Some(q @ ('"' | '\'')) if rest.len() >= 2 && rest.ends_with(q) => {
                &rest[1..rest.len() - 1]
            }
            _ => rest,
        };
        let mut unescaped = String::with_capacity(value.len());
        let mut chars = value.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('\\', Some(&n)) if matches!(n, '\\' | '$' | '"' | '\'' | '`') => {
                    unescaped.push(n);
                    chars.next();
                }
                _ => unescaped.push(c),
            }
        }
        out.insert(name.to_owned(), unescaped);
    }
    out
}

/// `_REPLACE_LINUX_RE.sub("", name)`: drops a non-word character followed by
/// `linux` or `gnu/linux` (any case).
fn strip_linux(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        let after = &rest[c.len_utf8()..];
        if !(c.is_alphanumeric() || c == '_') {
            let lower = after.to_lowercase();
            let skip = if lower.starts_with("gnu/linux") {
                Some("gnu/linux".len())
            } else if lower.starts_with("linux") {
                Some("linux".len())
            } else {
                None
            };
            if let Some(n) = skip.filter(|n| after.is_char_boundary(*n)) {
                rest = &after[n..];
                continue;
            }
        }
        out.push(c);
        rest = after;
    }
    out
}

/// `_derive_os_grain(osfullname, os_id)`.
pub(crate) fn derive_os(fullname: &str, os_id: Option<&str>) -> String {
    if let Some(id) = os_id {
        if let Some((_, _, os)) = ID_AND_NAME_MAP
            .iter()
            .find(|(i, n, _)| *i == id && *n == fullname)
        {
            return (*os).to_owned();
        }
    }
    let distroname = strip_linux(fullname).trim().to_owned();
    let short: String = distroname
        .replace(' ', "")
        .to_lowercase()
        .chars()
        .take(10)
        .collect();
    lookup(OS_NAME_MAP, &short).map_or(distroname, str::to_owned)
}

/// `_family_id(os_id, id_like)`.
fn family_id(os_id: &str, id_like: Option<&str>) -> String {
    let Some(like) = id_like.filter(|l| !l.is_empty()) else {
        return os_id.to_owned();
    };
    let ids: Vec<&str> = std::iter::once(os_id)
        .chain(like.split_whitespace())
        .collect();
    if ids.contains(&"debian") || ids.contains(&"ubuntu") {
        return "debian".to_owned();
    }
    ids.last().copied().unwrap_or(os_id).to_owned()
}

/// `_prettify_os_family`: `fedora` is `RedHat`, else capitalised.
fn prettify_family(family: &str) -> String {
    if family == "fedora" {
        return "RedHat".to_owned();
    }
    let mut chars = family.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

/// The codename in `VERSION="12 (bookworm)"`-style text.
fn paren_codename(text: &str) -> Option<String> {
    let start = text.find('(')?;
    let end = text[start..].find(')')? + start;
    Some(text[start + 1..end].to_owned())
}

/// `/etc/lsb-release` lines matching `_LSB_REGEX`.
fn parse_lsb_release() -> Vec<(String, String)> {
    let Ok(raw) = std::fs::read_to_string("/etc/lsb-release") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in raw.lines() {
        for key in [
            "DISTRIB_ID",
            "DISTRIB_RELEASE",
            "DISTRIB_CODENAME",
            "DISTRIB_DESCRIPTION",
        ] {
            let Some(rest) = line.strip_prefix(key).and_then(|r| r.strip_prefix('=')) else {
                continue;
            };
            let rest = rest.strip_prefix(['\'', '"']).unwrap_or(rest);
            let value: String = rest
                .chars()
                .take_while(|c| {
                    c.is_alphanumeric() || c.is_whitespace() || matches!(c, '.' | '-' | '_')
                })
                .collect();
            if !value.is_empty() {
                out.push((
                    format!("lsb_{}", key.to_lowercase()),
                    value.trim_end().to_owned(),
                ));
            }
        }
    }
    out
}

/// `_linux_distribution_data()` with `lsb_has_error` (no `lsb_release` module).
pub(crate) fn distribution_data() -> Grains {
    let os_rel = os_release();
    distribution_from(&os_rel, parse_lsb_release())
}

fn distribution_from(os_rel: &BTreeMap<String, String>, lsb: Vec<(String, String)>) -> Grains {
    let get = |k: &str| os_rel.get(k).map(String::as_str);
    let mut g = Grains::default();
    for (k, v) in lsb {
        g.set(&k, v);
    }
    let have_os_release = !os_rel.is_empty();
    if have_os_release {
        let id = get("ID").unwrap_or("linux");
        let name = get("NAME").unwrap_or("Linux");
        g.set("os", derive_os(name, Some(id)));
        g.set("os_family", prettify_family(&family_id(id, get("ID_LIKE"))));
        let codename = get("VERSION_CODENAME")
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .or_else(|| match id {
                "astra" => get("VARIANT_ID").map(str::to_owned),
                "almalinux" | "rocky" => get("VERSION").and_then(paren_codename),
                _ => None,
            });
        g.set("oscodename", codename.map_or(Value::Nil, Value::from));
        g.set("osfullname", name.trim());
    }

    // The legacy path.
    if g.get_str("lsb_distrib_description")
        .to_lowercase()
        .starts_with("antergos")
    {
        g.set("osfullname", "Antergos Linux");
    } else if g.get("lsb_distrib_id").is_none() && have_os_release {
        if let Some(name) = get("NAME") {
            g.set("lsb_distrib_id", name.trim());
        }
        if let Some(v) = get("VERSION_ID") {
            g.set("lsb_distrib_release", v);
        }
        if let Some(c) = get("VERSION_CODENAME") {
            g.set("lsb_distrib_codename", c);
        } else if let Some(p) = get("PRETTY_NAME") {
            g.set("lsb_distrib_codename", p);
        }
        if let Some(cpe) = get("CPE_NAME") {
            let parts: Vec<&str> = cpe.split(':').collect();
            let vendor = parts
                .get(2)
                .filter(|_| parts.len() > 4 && parts[0] == "cpe");
            let vendor = vendor.map(|v| v.trim_start_matches('/').to_lowercase());
            let (vendor, version) = if parts.get(1).is_some_and(|p| p.starts_with('/')) {
                (
                    parts.get(2).map(|v| v.to_lowercase()),
                    parts.get(4).copied(),
                )
            } else {
                (
                    parts.get(3).map(|v| v.to_lowercase()).or(vendor),
                    parts.get(5).copied(),
                )
            };
            if parts.len() > 4 && matches!(vendor.as_deref(), Some("suse" | "opensuse")) {
                g.set("os", "SUSE");
                if get("NAME") == Some("openSUSE Leap") {
                    g.set("osfullname", "Leap");
                } else if get("VERSION") == Some("Tumbleweed") {
                    g.set("osfullname", "Tumbleweed");
                }
                if vendor.as_deref() == Some("opensuse") {
                    if let Some(v) = version.filter(|v| !v.is_empty() && *v != "*") {
                        g.set("lsb_distrib_release", v);
                    }
                }
            }
        }
        if get("ID").map(str::trim) == Some("mendel") {
            if let Some(v) = get("PRETTY_NAME").and_then(|p| p.split_whitespace().nth(2)) {
                g.set("lsb_distrib_release", v);
            }
        }
    }

    // `distro.name()`, `distro.version(best=True)`, `distro.codename()` from os-release.
    let distro_name = get("NAME").unwrap_or("").to_owned();
    let distro_version = get("VERSION_ID").unwrap_or("").to_owned();
    let distro_codename = get("VERSION_CODENAME")
        .map(str::to_owned)
        .or_else(|| get("VERSION").and_then(paren_codename))
        .unwrap_or_default();
    if g.get("osfullname").is_none() {
        let full = match g.get("lsb_distrib_id") {
            Some(id) if crate::pyval::py_str(id).to_lowercase().starts_with("nilrt") => {
                "nilrt".to_owned()
            }
            Some(id) => crate::pyval::py_str(id).trim().to_owned(),
            None => distro_name.trim().to_owned(),
        };
        g.set("osfullname", full);
    }
    let codename_field = g.get_str("lsb_distrib_codename").to_owned();
    if ["CentOS Linux 7", "CentOS Linux 8"]
        .iter()
        .any(|c| codename_field.contains(c))
    {
        g.remove("lsb_distrib_release");
    }
    let osrelease = match g.get("lsb_distrib_release") {
        Some(v) => crate::pyval::py_str(v),
        None => distro_version,
    };
    g.set("osrelease", osrelease.trim());
    let os_now = g.get_str("os").to_owned();
    if !codename_field.is_empty()
        && ["Rocky", "AlmaLinux", "AstraLinuxSE"]
            .iter()
            .any(|o| os_now.contains(o))
    {
        if let Some((_, after)) = codename_field.split_once('(') {
            let inner = after.split(')').next().unwrap_or(after);
            let fixed = if os_now == "AstraLinuxSE" {
                inner.split_whitespace().next().unwrap_or("").to_lowercase()
            } else {
                inner.to_owned()
            };
            g.set("lsb_distrib_codename", fixed);
        }
    }
    let lsb_codename = g.get_str("lsb_distrib_codename").trim().to_owned();
    let mut oscodename = if lsb_codename.is_empty() {
        distro_codename.clone()
    } else {
        lsb_codename
    };
    if oscodename.contains("Red Hat") {
        oscodename = distro_codename;
    }
    g.set("oscodename", oscodename);
    if g.get("os").is_none() {
        let full = g.get_str("osfullname").to_owned();
        g.set("os", derive_os(&full, None));
    }
    if let (Some(product), Some(version)) = (
        get("SUSE_SUPPORT_PRODUCT"),
        get("SUSE_SUPPORT_PRODUCT_VERSION"),
    ) {
        let pretty =
            get("SUSE_PRETTY_NAME").map_or_else(|| format!("{product} {version}"), str::to_owned);
        g.set("oscodename", pretty);
        g.set("osrelease", version);
        if product == "SUSE Linux Micro" {
            g.set("osfullname", "SL-Micro");
        }
    }
    let os = g.get_str("os").to_owned();
    g.set(
        "os_family",
        lookup(OS_FAMILY_MAP, &os).map_or(os.clone(), str::to_owned),
    );
    g
}

/// `_osrelease_data(os, osfullname, osrelease)`.
pub(crate) fn osrelease_data(os: &str, fullname: &str, osrelease: &str) -> Grains {
    let info: Vec<Value> = osrelease
        .split('.')
        .map(|part| {
            if !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) {
                part.parse::<u64>()
                    .map_or_else(|_| Value::from(part), Value::from)
            } else {
                Value::from(part)
            }
        })
        .collect();
    let mut g = Grains::default();
    let first = info.first().cloned().unwrap_or(Value::Nil);
    g.set("osrelease_info", Value::Array(info));
    if let Value::Integer(major) = &first {
        g.set("osmajorrelease", Value::Integer(*major));
    }
    let name = if matches!(
        os,
        "Debian" | "FreeBSD" | "OpenBSD" | "NetBSD" | "Mac" | "Raspbian" | "AlmaLinux"
    ) {
        os
    } else {
        fullname
    };
    let version = if matches!(os, "Ubuntu" | "Pop" | "NixOS") {
        osrelease.to_owned()
    } else {
        crate::pyval::py_str(&first)
    };
    g.set("osfinger", format!("{name}-{version}"));
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(text: &str) -> BTreeMap<String, String> {
        parse_os_release(text)
    }

    fn grains_of(g: &Grains, keys: &[&str]) -> Vec<String> {
        keys.iter()
            .map(|k| g.get(k).map(crate::pyval::py_str).unwrap_or_default())
            .collect()
    }

    #[test]
    fn os_names_derive_like_salt() {
        for (full, id, want) in [
            ("Debian GNU/Linux", Some("debian"), "Debian"),
            ("Ubuntu", Some("ubuntu"), "Ubuntu"),
            ("Rocky Linux", Some("rocky"), "Rocky"),
            ("AlmaLinux", Some("almalinux"), "AlmaLinux"),
            ("Fedora Linux", Some("fedora"), "Fedora"),
            ("Arch Linux", Some("arch"), "Arch"),
            ("Pop!_OS", Some("pop"), "Pop"),
            ("Red Hat Enterprise Linux", Some("rhel"), "RedHat"),
            ("CentOS Stream", Some("centos"), "CentOS Stream"),
            ("openSUSE Leap", Some("opensuse-leap"), "openSUSE Leap"),
        ] {
            assert_eq!(derive_os(full, id), want, "{full}");
        }
    }

    #[test]
    fn debian_bookworm_grains_match_salt() {
        let r = rel("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n");
        let g = distribution_from(&r, Vec::new());
        assert_eq!(
            grains_of(
                &g,
                &[
                    "os",
                    "os_family",
                    "oscodename",
                    "osfullname",
                    "lsb_distrib_id",
                    "osrelease"
                ]
            ),
            [
                "Debian",
                "Debian",
                "bookworm",
                "Debian GNU/Linux",
                "Debian GNU/Linux",
                "12"
            ]
        );
        let data = osrelease_data("Debian", "Debian GNU/Linux", "12");
        assert_eq!(
            grains_of(&data, &["osmajorrelease", "osfinger"]),
            ["12", "Debian-12"]
        );
    }

    #[test]
    fn rhel_like_families_come_from_the_family_map() {
        let r = rel("NAME=\"Rocky Linux\"\nVERSION=\"9.3 (Blue Onyx)\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.3\"\nPRETTY_NAME=\"Rocky Linux 9.3 (Blue Onyx)\"\n");
        let g = distribution_from(&r, Vec::new());
        assert_eq!(
            grains_of(&g, &["os", "os_family", "oscodename", "osrelease"]),
            ["Rocky", "RedHat", "Blue Onyx", "9.3"]
        );
        let data = osrelease_data("Rocky", "Rocky Linux", "9.3");
        assert_eq!(grains_of(&data, &["osfinger"]), ["Rocky Linux-9"]);
        let r = rel("NAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=jammy\n");
        let g = distribution_from(
            &r,
            vec![
                ("lsb_distrib_id".into(), "Ubuntu".into()),
                ("lsb_distrib_release".into(), "22.04".into()),
            ],
        );
        assert_eq!(
            grains_of(&g, &["os", "os_family", "osrelease"]),
            ["Ubuntu", "Debian", "22.04"]
        );
        assert_eq!(
            grains_of(&osrelease_data("Ubuntu", "Ubuntu", "22.04"), &["osfinger"]),
            ["Ubuntu-22.04"]
        );
    }

    #[test]
    fn os_release_values_unescape() {
        let r = rel("NAME='A \\\"b\\\"'\nBAD LINE\nX=\"unterminated\n");
        assert_eq!(r.get("NAME").map(String::as_str), Some("A \"b\""));
        assert_eq!(r.get("X").map(String::as_str), Some("\"unterminated"));
        assert_eq!(r.get("ID").map(String::as_str), Some("linux"));
    }
}
