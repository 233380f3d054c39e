//! Core grains on Linux, computed as `salt/grains/core.py` and the other stock grain
//! modules (`disks`, `extra`, `lvm`, `mdadm`, `minion_process`) compute them, in the
//! order Salt's loader merges them, then the `grains` file next to the configuration
//! and the static `grains` option on top.
//!
//! Left out: the Python-only grains (`pythonversion`, `pythonpath`,
//! `pythonexecutable`, `saltpath`, `zmqversion`, `package`, `ca_truststore`), the Xen
//! hypervisor version grains (`_virtual_hv`), and the legacy release files consulted
//! only when `/etc/os-release` is missing (SuSE-release, centos-release, ...).
//! `distro`'s version and codename, used only when os-release lacks them, are read
//! from os-release alone.

mod distro;
mod net;
mod virt;

use std::path::Path;
use std::process::{Command, Stdio};

use halite_config::MinionConfig;
use rmpv::Value;

use crate::args::dict_set;
use crate::modules::which;
use crate::pyval::truthy;

pub(crate) use distro::os_release;

/// An ordered grains dict being built.
#[derive(Debug, Default)]
pub(crate) struct Grains(Vec<(Value, Value)>);

impl Grains {
    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        dict_set(&mut self.0, Value::from(key), value.into());
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    pub fn get_str(&self, key: &str) -> &str {
        self.get(key).and_then(Value::as_str).unwrap_or("")
    }

    pub fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k.as_str() != Some(key));
    }

    pub fn merge(&mut self, other: Grains) {
        for (k, v) in other.0 {
            dict_set(&mut self.0, k, v);
        }
    }

    fn merge_value(&mut self, other: &Value) {
        if let Value::Map(entries) = other {
            for (k, v) in entries {
                dict_set(&mut self.0, k.clone(), v.clone());
            }
        }
    }

    pub fn into_value(self) -> Value {
        Value::Map(self.0)
    }
}

/// Runs a helper command (Salt's quiet `cmd.run_all`): exit code, stdout and stderr,
/// right-stripped; `None` if it cannot be started.
pub(crate) fn run_all(argv: &[&str]) -> Option<(i32, String, String)> {
    let (program, args) = argv.split_first()?;
    let out = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim_end().to_owned(),
    ))
}

/// The core grains, with the `grains` file and the configuration's static grains
/// merged over them (static grains win), as Salt's loader builds `__grains__`.
///
/// Differences from Salt: no Python grains (`pythonversion`, `pythonpath`,
/// `pythonexecutable`, `saltpath`, `zmqversion`, `package`, `ca_truststore`) and no Xen
/// hypervisor version grains; interfaces come from `getifaddrs` instead of
/// `ip addr show` (secondary IPv4 addresses keep kernel order, tunnel link addresses
/// are hex); the legacy release files read only without `/etc/os-release` are not
/// read; the locale name is mapped with a small table instead of Python's aliases.
/// Runs helper commands (`ip`, `systemd-detect-virt`, `dpkg`, `lspci`, ...) and
/// reverse DNS lookups, so it takes up to a few seconds.
pub fn core_grains(opts: &MinionConfig) -> Value {
    let mut g = Grains::default();
    let cwd = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    g.set("cwd", cwd);
    g.merge(net::default_gateway());
    if let Some(dns) = net::dns() {
        g.set("dns", dns);
    }
    g.set(
        "fibre_channel_host",
        Value::Boolean(Path::new("/sys/class/fc_host").is_dir()),
    );
    let ifaces = crate::os::interfaces();
    let fqdns_enabled = opts.get("enable_fqdns_grains").is_none_or(truthy);
    g.set(
        "fqdns",
        if fqdns_enabled {
            net::fqdns(&ifaces)
        } else {
            Value::Array(Vec::new())
        },
    );
    if let Some(id) = machine_id() {
        g.set("machine_id", id);
    }
    g.set(
        "master",
        opts.get("master")
            .cloned()
            .unwrap_or_else(|| Value::from("")),
    );
    g.set("server_id", server_id(&opts.id));
    let fqdn = net::hostname_grains(&mut g);
    net::interface_grains(&mut g, &ifaces, &fqdn);
    g.set("id", opts.id.as_str());
    reorder_id(&mut g);
    if let Some(params) = kernelparams() {
        g.set("kernelparams", params);
    }
    g.set("locale_info", locale_info());
    g.merge(os_data(opts));
    let path = std::env::var("PATH").unwrap_or_default().trim().to_owned();
    let systempath = Value::Array(path.split(':').map(Value::from).collect());
    g.set("path", path);
    g.set("systempath", systempath);
    g.set("saltversion", crate::SALT_VERSION);
    g.set(
        "saltversioninfo",
        Value::Array(vec![Value::from(3008), Value::from(3)]),
    );
    g.merge(disks());
    g.set("shell", crate::spec::default_shell());
    g.set(
        "transactional",
        Value::Boolean(which("transactional-update").is_some()),
    );
    g.merge(uefi());
    if let Some(lvm) = lvm() {
        g.set("lvm", lvm);
    }
    if let Some(mdadm) = mdadm() {
        g.set("mdadm", mdadm);
    }
    g.merge(minion_process());
    g.merge_value(&grains_file(opts));
    g.merge_value(&opts.grains);
    g.into_value()
}

/// Puts `id` after `hwaddr_interfaces`, where Salt's alphabetical grain functions
/// (`hwaddr_interfaces`, `id_`, `ip4_interfaces`) put it.
fn reorder_id(g: &mut Grains) {
    let Some(pos) = g.0.iter().position(|(k, _)| k.as_str() == Some("id")) else {
        return;
    };
    let entry = g.0.remove(pos);
    let at =
        g.0.iter()
            .position(|(k, _)| k.as_str() == Some("hwaddr_interfaces"))
            .map_or(g.0.len(), |i| i + 1);
    g.0.insert(at, entry);
}

/// `get_machine_id`: `/etc/machine-id`, else `/var/lib/dbus/machine-id`.
fn machine_id() -> Option<String> {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find(|p| Path::new(p).exists())
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
}

/// `get_server_id`: `sha256(id) % 2**31`.
fn server_id(id: &str) -> Value {
    let digest = openssl::sha::sha256(id.as_bytes());
    let tail = u32::from_be_bytes([digest[28], digest[29], digest[30], digest[31]]);
    Value::from(tail & 0x7fff_ffff)
}

/// `kernelparams`: `/proc/cmdline` split as a shell would, each word `key[=value]`.
fn kernelparams() -> Option<Value> {
    let raw = std::fs::read("/proc/cmdline").ok()?;
    let words = crate::modules::cmd::shlex_split(&String::from_utf8_lossy(&raw)).ok()?;
    Some(Value::Array(
        words
            .iter()
            .map(|word| {
                let parts: Vec<&str> = word.split('=').collect();
                let value = match parts.as_slice() {
                    [_, v] => Value::from(v.trim_matches('"')),
                    _ => Value::Nil,
                };
                Value::Array(vec![Value::from(parts[0]), value])
            })
            .collect(),
    ))
}

/// `locale_info`: Python's `locale.getlocale()` for the environment's `LC_CTYPE`
/// (with Python 3's coercion of the C locale to `C.UTF-8`), the system encoding and
/// the local zone's abbreviation.
///
/// Python maps names through its alias tables; here `C.UTF-8` becomes `en_US`,
/// `*.utf8` encodings `UTF-8`, and a name without an encoding gets `ISO8859-1`.
fn locale_info() -> Value {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let lc_all = env("LC_ALL");
    let mut name = lc_all
        .clone()
        .or_else(|| env("LC_CTYPE"))
        .or_else(|| env("LANG"))
        .unwrap_or_else(|| "C".to_owned());
    if lc_all.is_none() && matches!(name.as_str(), "C" | "POSIX") {
        name = "C.UTF-8".to_owned();
    }
    let (language, encoding) = parse_locale(&name);
    let text = |v: Option<String>| v.map_or(Value::Nil, Value::from);
    Value::Map(vec![
        (Value::from("defaultlanguage"), text(language)),
        (Value::from("defaultencoding"), text(encoding)),
        (Value::from("detectedencoding"), Value::from("utf-8")),
        (
            Value::from("timezone"),
            Value::from(crate::os::tz_abbrev().unwrap_or_else(|| "unknown".to_owned())),
        ),
    ])
}

/// `locale._parse_localename(locale.normalize(name))`, for common names.
fn parse_locale(name: &str) -> (Option<String>, Option<String>) {
    let base = name.split('@').next().unwrap_or(name);
    let (lang, enc) = match base.split_once('.') {
        Some((lang, enc)) => (lang, Some(enc)),
        None => (base, None),
    };
    if matches!(lang, "C" | "POSIX") && enc.is_none() {
        return (None, None);
    }
    let lang = if lang == "C" { "en_US" } else { lang };
    let enc = match enc {
        None => "ISO8859-1".to_owned(),
        Some(e) => {
            let norm: String = e
                .chars()
                .filter(|c| *c != '-' && *c != '_')
                .collect::<String>()
                .to_lowercase();
            match norm.as_str() {
                "utf8" => "UTF-8".to_owned(),
                "iso88591" => "ISO8859-1".to_owned(),
                "iso885915" => "ISO8859-15".to_owned(),
                _ => e.to_owned(),
            }
        }
    };
    (Some(lang.to_owned()), Some(enc))
}

/// `os_data()` on Linux.
fn os_data(opts: &MinionConfig) -> Grains {
    let mut g = Grains::default();
    g.set("num_gpus", 0);
    g.set("gpus", Value::Array(Vec::new()));
    let uname = crate::os::uname();
    g.set("kernel", uname.sysname.as_str());
    g.set("nodename", uname.nodename.as_str());
    g.set("kernelrelease", uname.release.as_str());
    g.set("kernelversion", uname.version.as_str());
    g.set("cpuarch", uname.machine.as_str());
    if which("selinuxenabled").is_some() {
        let enabled = run_all(&["selinuxenabled"]).is_some_and(|(code, _, _)| code == 0);
        let mut selinux = vec![(Value::from("enabled"), Value::Boolean(enabled))];
        if which("getenforce").is_some() {
            let enforced = run_all(&["getenforce"])
                .map(|(_, out, _)| out)
                .unwrap_or_default();
            selinux.push((Value::from("enforced"), Value::from(enforced.trim())));
        }
        g.set("selinux", Value::Map(selinux));
    }
    if which("systemctl").is_some() && which("localectl").is_some() {
        g.set("systemd", systemd());
    }
    g.set("init", init_system(opts));
    g.merge(distro::distribution_data());
    g.merge(cpudata());
    if opts.get("enable_lspci").is_none_or(truthy)
        && opts.get("enable_gpu_grains").is_none_or(truthy)
    {
        g.merge(gpu_data());
    }
    if Path::new("/proc/device-tree").is_dir() {
        g.merge(devicetree_data());
    }
    let osarch = osarch(g.get_str("os_family"), &uname.machine);
    g.set("osarch", osarch);
    g.merge(memdata());
    g.merge(hw_data());
    g.merge(virt::virtual_grains(opts, &g));
    g.set(
        "ps",
        if g.get_str("virtual") == "openvzhn" {
            "ps -fH -p $(grep -l \"^envID:[[:space:]]*0\\$\" /proc/[0-9]*/status | sed -e \"s=/proc/\\([0-9]*\\)/.*=\\1=\")  | awk '{ $7=\"\"; print }'"
        } else if g.get_str("os_family") == "NILinuxRT" {
            "ps -o user,pid,ppid,tty,time,comm"
        } else {
            "ps -efHww"
        },
    );
    let osrelease = g.get_str("osrelease").to_owned();
    if !osrelease.is_empty() {
        let os = g.get_str("os").to_owned();
        let fullname = g.get_str("osfullname").to_owned();
        g.merge(distro::osrelease_data(&os, &fullname, &osrelease));
    }
    g
}

/// `_systemd()`: version and feature line of `systemctl --version`.
fn systemd() -> Value {
    let (mut version, mut features) = ("UNDEFINED".to_owned(), String::new());
    if let Some((0, out, _)) = run_all(&["systemctl", "--version"]) {
        let lines: Vec<&str> = out.lines().collect();
        if let Some(first) = lines.first() {
            if first.starts_with("systemd ") {
                if let Some(v) = first.split_whitespace().nth(1) {
                    version = v.to_owned();
                }
                features = lines.get(1).map(|l| (*l).to_owned()).unwrap_or_default();
            }
        }
    }
    Value::Map(vec![
        (Value::from("version"), Value::from(version)),
        (Value::from("features"), Value::from(features)),
    ])
}

/// `_linux_init_system()`.
fn init_system(opts: &MinionConfig) -> String {
    if std::fs::metadata("/run/systemd/system").is_ok() {
        return "systemd".to_owned();
    }
    let Ok(raw) = std::fs::read("/proc/1/cmdline") else {
        return "unknown".to_owned();
    };
    let cmdline: Vec<String> = String::from_utf8_lossy(&raw)
        .replace('\0', " ")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let Some(first) = cmdline.first() else {
        return "unknown".to_owned();
    };
    let in_cmdline = |exe: &str| which(exe).is_some_and(|p| cmdline.contains(&p));
    match which(first) {
        Some(init_bin) if init_bin.ends_with("bin/init") => {
            let buf_size = opts
                .get("file_buffer_size")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(262_144);
            scan_init_binary(&init_bin, buf_size).unwrap_or_else(|| "unknown".to_owned())
        }
        _ if in_cmdline("supervisord") => "supervisord".to_owned(),
        _ if in_cmdline("dumb-init") => "dumb-init".to_owned(),
        _ if in_cmdline("tini") => "tini".to_owned(),
        _ if cmdline == ["runit"] => "runit".to_owned(),
        _ if cmdline.iter().any(|w| w == "/sbin/my_init") => "runit".to_owned(),
        _ => "unknown".to_owned(),
    }
}

/// Looks for `upstart`, `sysvinit` or `systemd` in the init binary, chunk by chunk.
fn scan_init_binary(path: &str, buf_size: usize) -> Option<String> {
    use std::io::Read;
    const INITS: [&[u8]; 3] = [b"upstart", b"sysvinit", b"systemd"];
    let mut file = std::fs::File::open(path).ok()?;
    let mut edge: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; buf_size];
    loop {
        let n = file.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        let mut buf = edge.clone();
        buf.extend(chunk[..n].iter().map(u8::to_ascii_lowercase));
        for item in INITS {
            if buf.windows(item.len()).any(|w| w == item) {
                return Some(String::from_utf8_lossy(item).into_owned());
            }
        }
        edge = buf[buf.len().saturating_sub(7)..].to_vec();
    }
}

/// `_linux_cpudata()`.
fn cpudata() -> Grains {
    let mut num_cpus: i64 = 0;
    let mut model: Option<String> = None;
    let mut flags: Option<Vec<Value>> = None;
    if let Ok(raw) = std::fs::read("/proc/cpuinfo") {
        for line in String::from_utf8_lossy(&raw).lines() {
            let comps: Vec<&str> = line.split(':').collect();
            if comps.len() < 2 {
                continue;
            }
            let key = comps[0].trim();
            let val = comps[1].trim();
            match key {
                "processor" => num_cpus += 1,
                "# processors" => num_cpus = val.parse().unwrap_or(num_cpus),
                "vendor_id" | "model name" | "cpu" => model = Some(val.to_owned()),
                "flags" | "Features" => {
                    flags = Some(val.split_whitespace().map(Value::from).collect());
                }
                "Processor" => {
                    model = Some(val.split('-').next().unwrap_or(val).to_owned());
                    num_cpus = 1;
                }
                _ => {}
            }
        }
    }
    let mut g = Grains::default();
    g.set("num_cpus", num_cpus);
    g.set("cpu_model", model.unwrap_or_else(|| "Unknown".to_owned()));
    g.set("cpu_flags", Value::Array(flags.unwrap_or_default()));
    g
}

/// `_linux_gpu_data()`: display controllers from `lspci -vmm`.
fn gpu_data() -> Grains {
    const VENDORS: [&str; 8] = [
        "nvidia",
        "amd",
        "ati",
        "intel",
        "cirrus logic",
        "vmware",
        "matrox",
        "aspeed",
    ];
    const CLASSES: [&str; 4] = [
        "3d controller",
        "display controller",
        "processing accelerators",
        "vga compatible controller",
    ];
    let mut g = Grains::default();
    let Some(lspci) = which("lspci") else {
        return g;
    };
    let Some((_, out, _)) = run_all(&[&lspci, "-vmm"]) else {
        return g;
    };
    let mut gpus = Vec::new();
    let mut dev: Vec<(String, String)> = Vec::new();
    for line in out.lines().chain([""]) {
        if line.is_empty() {
            let field = |k: &str| dev.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
            if field("Class").is_some_and(|c| CLASSES.contains(&c.to_lowercase().as_str())) {
                let vendor_text = field("Vendor").unwrap_or_default().to_lowercase();
                let words: Vec<&str> = vendor_text
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .collect();
                let vendor = VENDORS
                    .iter()
                    .find(|v| words.contains(v))
                    .copied()
                    .unwrap_or("unknown");
                gpus.push(Value::Map(vec![
                    (Value::from("vendor"), Value::from(vendor)),
                    (
                        Value::from("model"),
                        Value::from(field("Device").unwrap_or_default()),
                    ),
                ]));
            }
            dev.clear();
            continue;
        }
        if let Some((key, val)) = line.split_once(':') {
            dev.push((key.trim().to_owned(), val.trim().to_owned()));
        }
    }
    g.set("num_gpus", gpus.len());
    g.set("gpus", Value::Array(gpus));
    g
}

/// `_linux_devicetree_platform_data()`.
fn devicetree_data() -> Grains {
    let read = |name: &str| {
        std::fs::read(format!("/proc/device-tree/{name}"))
            .ok()
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .to_owned()
            })
            .filter(|s| !s.is_empty())
    };
    let mut g = Grains::default();
    if let Some(model) = read("model") {
        match model.split_once(',') {
            Some((maker, product)) => {
                g.set("manufacturer", maker);
                g.set("productname", product);
            }
            None => g.set("productname", model.as_str()),
        }
    }
    if let Some(id) = read("system-id") {
        g.set("serialnumber", id);
    }
    if let Some(serial) = read("serial-number") {
        g.set("serialnumber", serial);
    }
    g
}

/// `_osarch()`: dpkg's architecture on Debian, rpm's on Red Hat and SUSE, else the CPU.
fn osarch(os_family: &str, cpuarch: &str) -> String {
    let from = |argv: &[&str]| {
        run_all(argv)
            .map(|(_, out, _)| out.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    match os_family {
        "Debian" => from(&["dpkg", "--print-architecture"]).unwrap_or_else(|| cpuarch.to_owned()),
        "RedHat" | "Suse" => {
            if which("rpm").is_some() {
                from(&["rpm", "--eval", "%{_host_cpu}"]).unwrap_or_else(|| "unknown".to_owned())
            } else {
                cpuarch.to_owned()
            }
        }
        _ => cpuarch.to_owned(),
    }
}

/// `_linux_memdata()`: MiB, rounded down.
fn memdata() -> Grains {
    let mut g = Grains::default();
    g.set("mem_total", 0);
    g.set("swap_total", 0);
    if let Ok(raw) = std::fs::read_to_string("/proc/meminfo") {
        for line in raw.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let kib = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            match key.trim() {
                "MemTotal" => g.set("mem_total", kib / 1024),
                "SwapTotal" => g.set("swap_total", kib / 1024),
                _ => {}
            }
        }
    }
    g
}

/// `_hw_data()` from `/sys/class/dmi/id`.
fn hw_data() -> Grains {
    let mut g = Grains::default();
    let base = Path::new("/sys/class/dmi/id");
    if !base.exists() {
        return g;
    }
    for (key, file) in [
        ("biosversion", "bios_version"),
        ("biosvendor", "bios_vendor"),
        ("boardname", "board_name"),
        ("productname", "product_name"),
        ("manufacturer", "sys_vendor"),
        ("biosreleasedate", "bios_date"),
        ("uuid", "product_uuid"),
        ("serialnumber", "product_serial"),
    ] {
        if let Ok(raw) = std::fs::read(base.join(file)) {
            let text = String::from_utf8_lossy(&raw).trim().to_owned();
            g.set(
                key,
                if key == "uuid" {
                    text.to_lowercase()
                } else {
                    text
                },
            );
        }
    }
    g
}

/// `disks` grains: block devices by their `rotational` flag, virtual ones skipped.
fn disks() -> Grains {
    let mut disks = Vec::new();
    let mut ssds = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir("/sys/block")
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for entry in entries {
        let virtual_dev = std::fs::read_link(&entry)
            .is_ok_and(|t| t.to_string_lossy().starts_with("../devices/virtual/"));
        if virtual_dev {
            continue;
        }
        let Some(name) = entry.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        match std::fs::read(entry.join("queue/rotational"))
            .ok()
            .and_then(|b| b.first().copied())
        {
            Some(b'0') => ssds.push(Value::from(name)),
            Some(b'1') => disks.push(Value::from(name)),
            _ => {}
        }
    }
    let mut g = Grains::default();
    g.set("disks", Value::Array(disks));
    g.set("ssds", Value::Array(ssds));
    g
}

/// `uefi` grains.
fn uefi() -> Grains {
    let dir = ["/sys/firmware/efi/efivars", "/sys/firmware/efi/vars"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let secure = dir.is_some_and(|dir| {
        let files: Vec<_> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("SecureBoot-"))
                    .map(|e| {
                        if dir.ends_with("efivars") {
                            e.path()
                        } else {
                            e.path().join("data")
                        }
                    })
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default();
        files.len() == 1 && std::fs::read(&files[0]).is_ok_and(|b| b.last() == Some(&1))
    });
    let mut g = Grains::default();
    g.set("efi", Value::Boolean(dir.is_some()));
    g.set("efi-secure-boot", Value::Boolean(secure));
    g
}

/// The `lvm` grain: volume groups and their logical volumes, when `lvm` exists.
fn lvm() -> Option<Value> {
    let lvm = which("lvm")?;
    let (_, vgs, _) = run_all(&[&lvm, "vgs", "-o", "vg_name", "--noheadings"])?;
    let mut out = Vec::new();
    for vg in vgs.lines().map(str::trim) {
        let lvs = run_all(&[&lvm, "lvs", "-o", "lv_name", "--noheadings", vg])
            .map(|(_, o, _)| o)
            .unwrap_or_default();
        dict_set(
            &mut out,
            Value::from(vg),
            Value::Array(lvs.lines().map(|l| Value::from(l.trim())).collect()),
        );
    }
    Some(Value::Map(out))
}

/// The `mdadm` grain: md devices in `/proc/mdstat`, when it exists.
fn mdadm() -> Option<Value> {
    let raw = std::fs::read_to_string("/proc/mdstat").ok()?;
    let mut devices: Vec<String> = raw
        .lines()
        .filter(|l| !l.starts_with("Personalities : ") && !l.starts_with("unused devices:"))
        .filter_map(|l| l.split_once(" : ").map(|(d, _)| d.to_owned()))
        .collect();
    devices.sort();
    devices.dedup();
    Some(Value::Array(devices.into_iter().map(Value::from).collect()))
}

/// `minion_process` grains: the effective user and group, the pid.
fn minion_process() -> Grains {
    let euid = crate::os::euid();
    let user = crate::os::user_by_uid(euid);
    let username = user
        .as_ref()
        .map_or_else(|| euid.to_string(), |u| u.name.clone());
    let groupname = user
        .as_ref()
        .and_then(|u| crate::os::group_name(u.gid))
        .unwrap_or_default();
    let egid = crate::os::egid();
    let mut g = Grains::default();
    g.set("username", username);
    g.set("groupname", groupname);
    g.set("pid", std::process::id());
    g.set("gid", egid);
    g.set("uid", euid);
    g
}

/// `extra.config()`: the YAML `grains` file next to the configuration file.
fn grains_file(opts: &MinionConfig) -> Value {
    let conf = &opts.conf_file;
    let file = if conf.is_dir() {
        conf.join("grains")
    } else {
        conf.parent()
            .map_or_else(|| Path::new("grains").to_path_buf(), |d| d.join("grains"))
    };
    if !file.is_file() {
        return Value::Map(Vec::new());
    }
    match std::fs::read(&file)
        .ok()
        .map(|b| halite_config::yaml::load_bytes(&b))
    {
        Some(Ok(v @ Value::Map(_))) => v,
        _ => {
            tracing::warn!("Bad syntax in grains file! Skipping.");
            Value::Map(Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_id_is_sha256_mod_2_31() {
        // int(hashlib.sha256(b"testmin").hexdigest(), 16) % 2**31 == 168508286
        assert_eq!(server_id("testmin"), Value::from(168_508_286u32));
    }

    #[test]
    fn locale_names_parse_like_python() {
        let some = |a: &str, b: &str| (Some(a.to_owned()), Some(b.to_owned()));
        assert_eq!(parse_locale("C.UTF-8"), some("en_US", "UTF-8"));
        assert_eq!(parse_locale("de_DE.utf8"), some("de_DE", "UTF-8"));
        assert_eq!(parse_locale("fr_FR@euro"), some("fr_FR", "ISO8859-1"));
        assert_eq!(parse_locale("C"), (None, None));
    }

    #[test]
    fn core_grains_have_the_targeting_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = MinionConfig::from_yaml_str(
            "id: exec-test\ngrains:\n  os: Overridden\n  roles: [web]\n",
            &dir.path().join("minion"),
        )
        .expect("config loads");
        let grains = core_grains(&opts);
        for key in [
            "id",
            "os",
            "os_family",
            "kernel",
            "ipv4",
            "num_cpus",
            "mem_total",
            "saltversion",
        ] {
            assert!(halite_proto::value::get(&grains, key).is_some(), "{key}");
        }
        assert_eq!(
            halite_proto::value::get_str(&grains, "id"),
            Some("exec-test")
        );
        assert_eq!(
            halite_proto::value::get_str(&grains, "os"),
            Some("Overridden")
        );
        assert!(halite_proto::value::get(&grains, "pythonversion").is_none());
    }
}
