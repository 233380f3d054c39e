//! `_virtual()` on Linux: `virtual` and `virtual_subtype` from `systemd-detect-virt`
//! / `virt-what` / `dmidecode` / `lspci`, then the `/proc` and `/sys` checks, in
//! Salt's order.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{run_all, Grains};
use crate::modules::which;
use crate::pyval::truthy;
use halite_config::MinionConfig;

fn contains(hay: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| hay.contains(n))
}

/// What one detection command says; `Some` ends the command loop (Salt's `break`).
fn from_command(command: &str, output: &str, g: &mut Grains) -> bool {
    let mut set = |virt: &str, sub: Option<&str>| {
        g.set("virtual", virt);
        if let Some(sub) = sub {
            g.set("virtual_subtype", sub);
        }
    };
    match command {
        "systemd-detect-virt" => {
            if matches!(
                output,
                "qemu" | "kvm" | "oracle" | "xen" | "bochs" | "chroot" | "uml" | "systemd-nspawn"
            ) {
                set(output, None);
            } else if output.contains("vmware") {
                set("VMware", None);
            } else if output.contains("microsoft") {
                set("VirtualPC", None);
            } else if output.contains("lxc") {
                set("container", Some("LXC"));
            } else if output.contains("podman") {
                set("container", Some("Podman"));
            } else if output.contains("docker") {
                set("container", Some("Docker"));
            } else if output.contains("amazon") {
                set("Nitro", Some("Amazon EC2"));
            } else {
                return false;
            }
            true
        }
        "virt-what" => {
            for line in output.lines() {
                match line {
                    "kvm" | "qemu" | "uml" | "xen" => set(line, None),
                    l if l.contains("lxc") => set("container", Some("LXC")),
                    l if l.contains("docker") => set("container", Some("Docker")),
                    l if l.contains("vmware") => set("VMware", None),
                    l if l.contains("parallels") => set("Parallels", None),
                    l if l.contains("nutanix") => set("kvm", Some("Nutanix AHV")),
                    l if l.contains("hyperv") => set("HyperV", None),
                    "ibm_power-kvm" => set("kvm", None),
                    "ibm_power-lpar_shared" => set("LPAR", Some("shared")),
                    "ibm_power-lpar_dedicated" => set("LPAR", Some("dedicated")),
                    _ => continue,
                }
                break;
            }
            true
        }
        "dmidecode" => {
            if contains(
                output,
                &[
                    "Vendor: QEMU",
                    "Manufacturer: QEMU",
                    "Vendor: Bochs",
                    "Manufacturer: Bochs",
                ],
            ) {
                set("kvm", None);
            }
            if output.contains("BHYVE") {
                set("bhyve", None);
            } else if output.contains("Manufacturer: oVirt") {
                set("kvm", Some("ovirt"));
            } else if output.contains("Product Name: RHEV Hypervisor") {
                set("kvm", Some("rhev"));
            } else if output.contains("VirtualBox") {
                set("VirtualBox", None);
            } else if output.contains("VMware") {
                set("VMware", None);
            } else if output.contains(": Microsoft") && output.contains("Virtual Machine") {
                set("VirtualPC", None);
            } else if output.contains("Parallels Software") {
                set("Parallels", None);
            } else if output.contains("Manufacturer: Google") {
                set("kvm", None);
            } else if output.contains("Manufacturer: Nutanix")
                && output.contains("Product Name: AHV")
            {
                set("kvm", Some("Nutanix AHV"));
            } else if output.contains("Vendor: SeaBIOS") {
                set("kvm", None);
            }
            true
        }
        "lspci" => {
            let model = output.to_lowercase();
            if model.contains("vmware") {
                set("VMware", None);
            } else if model.contains("virtualbox") {
                set("VirtualBox", None);
            } else if model.contains("qemu") || model.contains("virtio") {
                set("kvm", None);
            }
            true
        }
        _ => false,
    }
}

/// `virtual` and `virtual_subtype`.
pub(super) fn virtual_grains(opts: &MinionConfig, osdata: &Grains) -> Grains {
    let mut g = Grains::default();
    g.set("virtual", "physical");
    let mut commands: Vec<&str> = if which("virt-what").is_some() {
        vec!["virt-what"]
    } else {
        vec!["systemd-detect-virt", "virt-what", "dmidecode"]
    };
    if opts.get("enable_lspci").is_none_or(truthy) && Path::new("/proc/bus/pci").exists() {
        commands.push("lspci");
    }
    for command in commands {
        let Some(path) = which(command) else {
            continue;
        };
        let Some((code, stdout, _)) = run_all(&[&path]) else {
            continue;
        };
        if code > 0 {
            continue;
        }
        if from_command(command, &stdout, &mut g) {
            break;
        }
    }

    let same_root = std::fs::metadata("/")
        .ok()
        .zip(std::fs::metadata("/proc/1/root/.").ok())
        .map(|(a, b)| a.dev() == b.dev() && a.ino() == b.ino());
    if same_root == Some(false) {
        g.set("virtual_subtype", "chroot");
    }
    if Path::new("/proc/vz").is_dir() {
        if Path::new("/proc/vz/version").is_file() {
            g.set("virtual", "openvzhn");
        } else if Path::new("/proc/vz/veinfo").is_file() {
            g.set("virtual", "openvzve");
        }
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            if let Some(id) = line.strip_prefix("envID:").map(str::trim) {
                if let Ok(id) = id.parse::<u64>() {
                    g.set("virtual", if id != 0 { "openvzve" } else { "openvzhn" });
                }
            }
        }
    }
    if ["/proc/sys/xen", "/sys/bus/xen", "/proc/xen"]
        .iter()
        .any(|p| Path::new(p).is_dir())
    {
        if Path::new("/proc/xen/xsd_kva").is_file() {
            g.set("virtual_subtype", "Xen Dom0");
        } else if osdata.get_str("productname") == "HVM domU" {
            g.set("virtual_subtype", "Xen HVM DomU");
        } else if let Ok(caps) = std::fs::read_to_string("/proc/xen/capabilities") {
            let sub = if caps.contains("control_d") {
                "Xen Dom0"
            } else {
                "Xen PV DomU"
            };
            g.set("virtual_subtype", sub);
        } else if Path::new("/sys/bus/xen/drivers/xenconsole").is_dir() {
            g.set("virtual_subtype", "Xen PV DomU");
        }
        if g.get_str("virtual_subtype").to_lowercase().contains("dom") {
            g.set("virtual", "xen");
        }
    }
    if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains("QEMU Virtual CPU")) {
        g.set("virtual", "kvm");
    }
    if let Ok(raw) = std::fs::read("/sys/devices/virtual/dmi/id/product_name") {
        let product = String::from_utf8_lossy(&raw);
        if product.contains("VirtualBox") {
            g.set("virtual", "VirtualBox");
        } else if product.contains("RHEV Hypervisor") {
            g.set("virtual", "kvm");
            g.set("virtual_subtype", "rhev");
        } else if product.contains("oVirt Node") {
            g.set("virtual", "kvm");
            g.set("virtual_subtype", "ovirt");
        } else if product.contains("Google") {
            g.set("virtual", "gce");
        } else if product.contains("BHYVE") {
            g.set("virtual", "bhyve");
        }
    }
    if let Ok(cgroup) = std::fs::read_to_string("/proc/1/cgroup") {
        if cgroup.contains(":/lxc/") {
            g.set("virtual", "container");
            g.set("virtual_subtype", "LXC");
        } else if cgroup.contains(":/kubepods/") {
            g.set("virtual_subtype", "kubernetes");
        } else if cgroup.contains(":/libpod_parent/") {
            g.set("virtual_subtype", "libpod");
        } else if contains(
            &cgroup,
            &[":/system.slice/docker", ":/docker/", ":/docker-ce/"],
        ) {
            g.set("virtual", "container");
            g.set("virtual_subtype", "Docker");
        }
    }
    if g.get_str("virtual_subtype") != "LXC" {
        if let Ok(raw) = std::fs::read("/proc/1/environ") {
            if String::from_utf8_lossy(&raw).contains("container=lxc") {
                g.set("virtual", "container");
                g.set("virtual_subtype", "LXC");
            }
        }
    }
    if g.get("virtual_subtype").is_some_and(truthy) && g.get_str("virtual") == "physical" {
        g.set("virtual", "virtual");
    }
    if matches!(g.get_str("virtual"), "qemu" | "kvm" | "xen" | "amazon") {
        if let Some(dmidecode) = which("dmidecode") {
            let output = run_all(&[&dmidecode, "-t", "system"])
                .map(|(_, o, _)| o)
                .unwrap_or_default();
            if output.contains("Manufacturer: Amazon EC2") {
                if g.get_str("virtual") != "xen" {
                    g.set("virtual", "Nitro");
                }
                let product = output
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("Product Name: "))
                    .map(str::to_owned);
                g.set(
                    "virtual_subtype",
                    product
                        .map_or_else(|| "Amazon EC2".to_owned(), |p| format!("Amazon EC2 ({p})")),
                );
            } else if output
                .lines()
                .any(|l| l.contains("Version: ") && l.contains(".amazon"))
            {
                g.set("virtual_subtype", "Amazon EC2");
            } else if output.contains("Manufacturer: Nutanix")
                && output.contains("Product Name: AHV")
            {
                g.set("virtual_subtype", "Nutanix AHV");
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value;

    #[test]
    fn detect_virt_outputs_map_like_salt() {
        for (out, virt, sub) in [
            ("kvm", "kvm", None),
            ("docker", "container", Some("Docker")),
            ("lxc", "container", Some("LXC")),
            ("vmware", "VMware", None),
            ("amazon", "Nitro", Some("Amazon EC2")),
        ] {
            let mut g = Grains::default();
            assert!(from_command("systemd-detect-virt", out, &mut g), "{out}");
            assert_eq!(g.get_str("virtual"), virt, "{out}");
            assert_eq!(
                g.get("virtual_subtype").and_then(Value::as_str),
                sub,
                "{out}"
            );
        }
        let mut g = Grains::default();
        assert!(!from_command("systemd-detect-virt", "none", &mut g));
    }
}
