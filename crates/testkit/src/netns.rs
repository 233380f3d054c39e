//! Network labs: masters and minions on distinct addresses, in network namespaces a test
//! creates, with faults the test injects (a cut link, packet loss, a frozen or killed
//! process).
//!
//! What it does: a [`Lab`] is a hub namespace holding a bridge (`br0`); each
//! [`Lab::add_host`] makes a namespace with `lo` up and an `eth0` (one end of a veth pair
//! whose other end, `h<i>`, is a port of the bridge) at `10.77.<L>.<i>/24`, so every host of
//! the lab reaches every other at layer 2. [`Host::spawn`] and [`Host::run`] start a
//! [`Command`] in a host, as a [`Proc`] (stopped on drop, killed with the test, output kept
//! for the failure report) or to completion; [`Host::within`] runs a closure there (bind a
//! listener, connect, [`Host::ping`]); the `Host::start_*`/`Host::run_*` starters are the
//! crate's starters run inside the host. Faults: [`Lab::cut_link`]/[`Lab::restore_link`]
//! (the host's cable is pulled and plugged back), [`Lab::set_loss`] (random loss on the
//! host's link, `0` restores it), and on processes [`Proc::kill`] (SIGKILL),
//! [`Proc::freeze`]/[`Proc::thaw`] (SIGSTOP/SIGCONT).
//!
//! What it does not do: route anywhere outside the lab (no default route, no NAT, no DNS:
//! use addresses), connect labs to each other, delay, reorder or duplicate packets, or decide
//! when a daemon is ready.
//!
//! How multi-master and scale-out tests use it: one host per master, each with a root of
//! its own bound to the host's address, and minion hosts whose configs list the masters.
//!
//! ```no_run
//! use halite_testkit::{Lab, TempRoot, TIMEOUT};
//! use std::net::SocketAddr;
//!
//! let mut lab = match Lab::new() {
//!     Ok(lab) => lab,
//!     Err(why) => return eprintln!("skipped: {why}"),
//! };
//! let (m1, m2, node) = (lab.add_host("m1"), lab.add_host("m2"), lab.add_host("node"));
//! let root1 = TempRoot::for_lab_host(m1.ip(), "auto_accept: true\n");
//! let root2 = TempRoot::for_lab_host(m2.ip(), "auto_accept: true\n");
//! // (copy root1's master key pair into root2.master_pki_dir() where the masters share it)
//! root1.add_minion_for("n1", &[m1.ip(), m2.ip()], "master_type: failover\n");
//! let master1 = m1.start_halite_master(&root1);
//! let _master2 = m2.start_halite_master(&root2);
//! m1.wait_for_port(SocketAddr::from((m1.ip(), root1.ret_port())), TIMEOUT);
//! let _minion = node.start_halite_minion(&root1, "n1");
//! // ... m1.run_halite(&root1, ["n1", "test.ping"]) ...
//! lab.cut_link(&m1); // failover: the minion must find m2
//! lab.restore_link(&m1); // failback
//! master1.freeze(); // a hung master: its TCP port still accepts, nothing answers
//! ```
//!
//! Every master of a lab serves on Salt's default ports (each host has its own port space),
//! so a minion needs one `master_port` for all its masters. Scale-out tests either give each
//! minion a host (up to 254 per lab) or run many minions on one host (`halite-swarm`).
//! Declare the lab first, then the roots, then the `Proc`s: they drop in reverse order.
//!
//! Deviation from the usual tooling: loss is not `tc netem` (this machine's kernel is built
//! without `sch_netem`) but a classic-BPF classifier on the `clsact` hook of the host's bridge
//! port, in both directions, that drops each packet with the given probability
//! independently, which is what `netem loss <p>%` does; it needs only `tc`.
//!
//! Invariants:
//! - Only root makes a lab; anyone else gets [`LabError::NotRoot`] and the test returns early
//!   saying why (CI runs as root).
//! - Namespaces are named `halite-<pid>-<start time>-<n>-<host>` (`hub` for the hub): unique
//!   to the test process (the start time tells a reused pid apart) and to the lab within it.
//!   Interface names live inside the lab's namespaces, so labs never collide on them, and a
//!   lab is its own layer-2 segment, so labs may even share addresses (`<L>` varies with pid
//!   and counter only to tell parallel labs apart in logs).
//! - A lab's namespaces are deleted when it drops, during a panic too; [`Lab::new`] first
//!   deletes the namespaces of labs whose test process is gone (killed before its drop ran).
//!   Processes in a host are the `Proc`'s to stop: a namespace lives on until its last
//!   process exits.
//! - Admin commands (`ip`, `tc`) that fail panic with their stderr: a lab that cannot be
//!   built is a failed test, not a skipped one.

use std::ffi::OsStr;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::paths::{halite_bin, stock_bin};
use crate::process::{run_command, start_time, wait_until, Proc};
use crate::root::TempRoot;
use crate::starters::{halite_command, minion_command, spawn_stock, stock_command, TIMEOUT};
use crate::users::running_as_root;

/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";
/// First part of every lab namespace's name.
const NAME_PREFIX: &str = "halite-";
/// The bridge in the hub namespace.
const BRIDGE: &str = "br0";
/// A host's interface on the lab network.
const HOST_IF: &str = "eth0";
/// Most hosts a lab can hold (`.1` to `.254` of its /24).
const MAX_HOSTS: usize = 254;
/// Time an `ip` or `tc` command may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a lab cannot be made on this machine.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Namespaces, veth pairs and tc filters need root.
    #[error("a network lab needs root (ip netns, veth, tc); this test runs as uid {uid}")]
    NotRoot {
        /// The effective uid of the test process.
        uid: u32,
    },
}

/// A lab network: a hub namespace with a bridge, and the hosts plugged into it. Deleted on
/// drop (see the module docs).
pub struct Lab {
    prefix: String,
    hub: String,
    octet: u8,
    hosts: Vec<Host>,
}

/// A host of a [`Lab`]: a network namespace with one address. A cheap handle; it does not
/// keep the lab alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    name: String,
    netns: String,
    ip: Ipv4Addr,
    /// This host's port on the hub's bridge.
    port: String,
}

impl Lab {
    /// A new, empty lab, after deleting what labs of dead test processes left behind.
    ///
    /// # Errors
    /// [`LabError::NotRoot`] when the test does not run as root.
    ///
    /// # Panics
    /// When `ip` fails to make the hub namespace or its bridge.
    pub fn new() -> Result<Lab, LabError> {
        if !running_as_root() {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let uid = unsafe { libc::geteuid() };
            return Err(LabError::NotRoot { uid });
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let start = start_time(pid)
            .unwrap_or_else(|| panic!("cannot read the start time of this process ({pid})"));
        sweep_leftovers();
        let prefix = format!("{NAME_PREFIX}{pid}-{start}-{n}");
        let lab = Lab {
            hub: format!("{prefix}-hub"),
            prefix,
            octet: lab_octet(pid, n),
            hosts: Vec::new(),
        };
        admin("ip", ["netns", "add", &lab.hub]);
        admin(
            "ip",
            ["-n", &lab.hub, "link", "add", BRIDGE, "type", "bridge"],
        );
        admin("ip", ["-n", &lab.hub, "link", "set", BRIDGE, "up"]);
        Ok(lab)
    }

    /// Adds host `name` at the lab's next address (`10.77.<L>.1`, `.2`, ...) and returns it.
    ///
    /// # Panics
    /// When `name` is not 1 to 24 of `a-z`, `0-9`, `-` (not leading), is `hub` or taken,
    /// when the lab is full, or when `ip` fails.
    pub fn add_host(&mut self, name: &str) -> Host {
        check_host_name(name);
        assert!(
            name != "hub" && self.hosts.iter().all(|h| h.name != name),
            "host name {name:?} is taken in this lab"
        );
        assert!(
            self.hosts.len() < MAX_HOSTS,
            "a lab holds at most {MAX_HOSTS} hosts"
        );
        let index = self.hosts.len() + 1;
        let host = Host {
            name: name.to_owned(),
            netns: format!("{}-{name}", self.prefix),
            ip: Ipv4Addr::new(10, 77, self.octet, index as u8),
            port: format!("h{index}"),
        };
        // Known before it exists, so drop deletes a half-made host too.
        self.hosts.push(host.clone());
        let (ns, hub, port) = (host.netns.as_str(), self.hub.as_str(), host.port.as_str());
        admin("ip", ["netns", "add", ns]);
        admin("ip", ["-n", ns, "link", "set", "lo", "up"]);
        admin(
            "ip",
            [
                "-n", hub, "link", "add", port, "type", "veth", "peer", "name", HOST_IF, "netns",
                ns,
            ],
        );
        admin(
            "ip",
            ["-n", hub, "link", "set", port, "master", BRIDGE, "up"],
        );
        let cidr = format!("{}/24", host.ip);
        admin("ip", ["-n", ns, "addr", "add", &cidr, "dev", HOST_IF]);
        admin("ip", ["-n", ns, "link", "set", HOST_IF, "up"]);
        host
    }

    /// The hosts added so far, in order.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// Pulls `host`'s cable: its bridge port goes down, so its `eth0` loses carrier and
    /// everything it sends or is sent is dropped without an error (its address and routes
    /// stay, as on a real machine). Connections time out; nothing is reset.
    ///
    /// # Panics
    /// When `host` is not of this lab, or `ip` fails.
    pub fn cut_link(&self, host: &Host) {
        self.set_port(host, "down");
    }

    /// Plugs `host`'s cable back in after [`Lab::cut_link`] (loss set with
    /// [`Lab::set_loss`] stays).
    ///
    /// # Panics
    /// When `host` is not of this lab, or `ip` fails.
    pub fn restore_link(&self, host: &Host) {
        self.set_port(host, "up");
    }

    /// Drops each packet to and from `host` with probability `percent`/100, independently
    /// (`100` is a silent partition with the carrier up); `0` removes the loss.
    ///
    /// # Panics
    /// When `percent` is not in `0..=100`, `host` is not of this lab, or `tc` fails.
    pub fn set_loss(&self, host: &Host, percent: f64) {
        assert!(
            (0.0..=100.0).contains(&percent),
            "loss must be a percentage in 0..=100, not {percent}"
        );
        let port = self.port_of(host);
        let hub = self.hub.as_str();
        let qdiscs = admin("tc", ["-n", hub, "qdisc", "show", "dev", port]);
        if percent == 0.0 {
            if qdiscs.contains("clsact") {
                admin("tc", ["-n", hub, "qdisc", "del", "dev", port, "clsact"]);
            }
            return;
        }
        admin("tc", ["-n", hub, "qdisc", "replace", "dev", port, "clsact"]);
        let program = drop_program(percent);
        for direction in ["ingress", "egress"] {
            admin(
                "tc",
                [
                    "-n", hub, "filter", "replace", "dev", port, direction, "pref", "1", "handle",
                    "1", "bpf", "da", "bytecode", &program,
                ],
            );
        }
    }

    fn set_port(&self, host: &Host, state: &str) {
        let port = self.port_of(host);
        admin("ip", ["-n", &self.hub, "link", "set", port, state]);
    }

    /// `host`'s bridge port; port names repeat across labs, so a foreign host is refused.
    fn port_of<'h>(&self, host: &'h Host) -> &'h str {
        assert!(
            self.hosts.contains(host),
            "host {} ({}) is not of the lab {}",
            host.name,
            host.netns,
            self.prefix
        );
        &host.port
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("==== halite-testkit: lab {} ====", self.prefix);
            for host in &self.hosts {
                eprintln!("{} {} (netns {})", host.name, host.ip, host.netns);
            }
        }
        let names = self.hosts.iter().map(|h| &h.netns).chain([&self.hub]);
        for name in names {
            if Path::new(NETNS_DIR).join(name).exists() {
                if let Err(why) = delete_netns(name) {
                    eprintln!("halite-testkit: {why}");
                }
            }
        }
    }
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("hub", &self.hub)
            .field("hosts", &self.hosts)
            .finish()
    }
}

impl Host {
    /// The name given to [`Lab::add_host`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's address on the lab network.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The host's network namespace (`ip netns exec <it> ...` enters it from a shell).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Runs `f` on a thread inside the host's network namespace and returns its result.
    /// Sockets made there stay in the host's namespace after `f` returns; processes
    /// spawned there start in it. A panic in `f` is resumed here.
    ///
    /// # Panics
    /// When the namespace cannot be entered (the lab was dropped), or `f` panics.
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = Path::new(NETNS_DIR).join(&self.netns);
        let netns = File::open(&path).unwrap_or_else(|e| {
            panic!(
                "cannot open {} ({e}): is the lab of host {} gone?",
                path.display(),
                self.name
            )
        });
        std::thread::scope(|scope| {
            let worker = scope.spawn(move || {
                // SAFETY: setns(2) takes a descriptor we own and a flag, and changes only
                // this thread's network namespace (this thread is ours, scoped to the call).
                if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    let e = std::io::Error::last_os_error();
                    panic!("cannot enter {}: {e}", path.display());
                }
                f()
            });
            worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// [`Proc::spawn`] in the host: `cmd` starts in the host's namespace (forked from a
    /// thread inside it, so a command switching user works as well).
    ///
    /// # Panics
    /// As [`Proc::spawn`] and [`Host::within`].
    pub fn spawn(&self, cmd: Command, out_dir: &Path, name: &str) -> Proc {
        self.within(move || Proc::spawn(cmd, out_dir, name))
    }

    /// [`run_command`] in the host.
    ///
    /// # Panics
    /// As [`run_command`] and [`Host::within`].
    pub fn run(&self, cmd: Command, timeout: Duration) -> Output {
        self.within(move || run_command(cmd, timeout))
    }

    /// Whether `to` answers an ICMP echo from this host within `timeout` (requests are
    /// repeated every 200 ms meanwhile).
    ///
    /// # Panics
    /// When the raw ICMP socket cannot be used, and as [`Host::within`].
    pub fn ping(&self, to: Ipv4Addr, timeout: Duration) -> bool {
        self.within(|| crate::ping::echo(to, timeout))
            .unwrap_or_else(|e| panic!("ping from host {} to {to}: {e}", self.name))
    }

    /// Whether a TCP connection from this host to `addr` is established within `timeout`.
    pub fn connects(&self, addr: SocketAddr, timeout: Duration) -> bool {
        self.within(|| TcpStream::connect_timeout(&addr, timeout).is_ok())
    }

    /// Waits until something accepts TCP connections from this host on `addr`.
    ///
    /// # Panics
    /// On timeout.
    pub fn wait_for_port(&self, addr: SocketAddr, timeout: Duration) {
        let open = wait_until(timeout, || self.connects(addr, Duration::from_secs(1)));
        assert!(
            open,
            "nothing accepts connections from host {} on {addr} after {timeout:?}",
            self.name
        );
    }

    /// [`crate::start_halite_master`] in the host (its output as `halite-master@<host>`).
    pub fn start_halite_master(&self, root: &TempRoot) -> Proc {
        let name = format!("halite-master@{}", self.name);
        self.spawn(
            halite_command(root, "halite-master"),
            &root.procs_dir(),
            &name,
        )
    }

    /// [`crate::start_halite_minion`] in the host (its output as
    /// `halite-minion-<id>@<host>`).
    pub fn start_halite_minion(&self, root: &TempRoot, id: &str) -> Proc {
        let cmd = minion_command(root, id, &halite_bin("halite-minion"));
        let name = format!("halite-minion-{id}@{}", self.name);
        self.spawn(cmd, &root.procs_dir(), &name)
    }

    /// [`crate::start_stock_master`] in the host (its output as `salt-master@<host>`).
    pub fn start_stock_master(&self, root: &TempRoot) -> Proc {
        let cmd = stock_command(root, "salt-master");
        let name = format!("salt-master@{}", self.name);
        self.within(move || spawn_stock(cmd, root, &name))
    }

    /// [`crate::start_stock_minion`] in the host (its output as
    /// `salt-minion-<id>@<host>`).
    pub fn start_stock_minion(&self, root: &TempRoot, id: &str) -> Proc {
        let cmd = minion_command(root, id, &stock_bin("salt-minion"));
        let name = format!("salt-minion-{id}@{}", self.name);
        self.within(move || spawn_stock(cmd, root, &name))
    }

    /// [`crate::run_halite`] in the host: `halite -c DIR <args>`.
    pub fn run_halite<I, S>(&self, root: &TempRoot, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = halite_command(root, "halite");
        cmd.args(args);
        self.run(cmd, TIMEOUT)
    }

    /// [`crate::run_stock`] in the host: `<program> -c DIR <args>` from the stock venv.
    pub fn run_stock<I, S>(&self, root: &TempRoot, program: &str, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = stock_command(root, program);
        cmd.args(args);
        self.run(cmd, TIMEOUT)
    }
}

/// Third octet of a lab's addresses: varies with pid and counter, for telling labs apart.
fn lab_octet(pid: u32, n: u32) -> u8 {
    (pid.wrapping_add(n) % 256) as u8
}

/// Host names become part of namespace names and Proc output file names.
fn check_host_name(name: &str) {
    let plain = (1..=24).contains(&name.len())
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    assert!(
        plain,
        "host name {name:?} must be 1 to 24 of a-z, 0-9 and '-', not starting with '-'"
    );
}

/// Classic BPF for `tc ... bpf da bytecode`: drop (`TC_ACT_SHOT`) when a random u32 is
/// below `percent`% of 2^32, else pass (`TC_ACT_OK`).
fn drop_program(percent: f64) -> String {
    /// `ld rand`: BPF_LD|BPF_W|BPF_ABS of the ancillary word SKF_AD_OFF + SKF_AD_RANDOM.
    const LD_RANDOM: &str = "32 0 0 4294963256";
    /// BPF_JMP|BPF_JGE|BPF_K.
    const JGE: u16 = 0x35;
    /// BPF_RET|BPF_K.
    const RET: u16 = 0x06;
    const TC_ACT_OK: u32 = 0;
    const TC_ACT_SHOT: u32 = 2;
    let threshold = (percent / 100.0 * 4_294_967_296.0).round() as u64;
    match u32::try_from(threshold) {
        // if random >= threshold, skip one (to pass), else fall through (to drop)
        Ok(t) => {
            format!("4,{LD_RANDOM},{JGE} 1 0 {t},{RET} 0 0 {TC_ACT_SHOT},{RET} 0 0 {TC_ACT_OK}")
        }
        Err(_) => format!("1,{RET} 0 0 {TC_ACT_SHOT}"),
    }
}

/// The (pid, start time) of the test process that made lab namespace `name`, or `None`
/// when `name` is not a lab namespace.
fn owner(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_prefix(NAME_PREFIX)?.splitn(4, '-');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u32>().ok()?;
    parts.next().filter(|role| !role.is_empty())?;
    Some((pid, start))
}

/// Deletes the lab namespaces whose test process is gone. Another test process may be
/// sweeping too, so a namespace that vanished meanwhile is no error.
fn sweep_leftovers() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    for name in names {
        let Some((pid, start)) = owner(&name) else {
            continue;
        };
        if start_time(pid) == Some(start) {
            continue;
        }
        match delete_netns(&name) {
            Ok(()) => eprintln!(
                "halite-testkit: deleted network namespace {name}, left by a test process \
                 that is gone"
            ),
            Err(why) if Path::new(NETNS_DIR).join(&name).exists() => {
                eprintln!("halite-testkit: {why}")
            }
            Err(_) => {}
        }
    }
}

/// `ip netns del <name>`, never panicking (it runs in drop).
fn delete_netns(name: &str) -> Result<(), String> {
    let output = Command::new("ip")
        .args(["netns", "del", name])
        .output()
        .map_err(|e| format!("cannot run ip netns del {name}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip netns del {name} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Runs an admin command (`ip`, `tc`) and returns its stdout; panics with its stderr when
/// it fails.
fn admin<const N: usize>(program: &str, args: [&str; N]) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let output = run_command(cmd, ADMIN_TIMEOUT);
    assert!(
        output.status.success(),
        "{program} {} failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, UdpSocket};
    use std::os::unix::fs::MetadataExt;

    /// A lab, or `None` (the caller returns) when not root.
    fn lab_or_skip() -> Option<Lab> {
        match Lab::new() {
            Ok(lab) => Some(lab),
            Err(why) => {
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    fn exists(netns: &str) -> bool {
        Path::new(NETNS_DIR).join(netns).exists()
    }

    /// State letter of process `pid` (`/proc/<pid>/stat`, after the command name).
    fn state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    }

    #[test]
    fn lab_names_carry_their_owner_and_nothing_else_parses() {
        assert_eq!(owner("halite-123-456-0-hub"), Some((123, 456)));
        assert_eq!(owner("halite-123-456-7-web-1"), Some((123, 456)));
        for other in [
            "halite-123-456-0-",
            "halite-123-456-0",
            "halite-x-456-0-hub",
            "halite-123--0-hub",
            "halite-123-456-n-hub",
            "other-123-456-0-hub",
            "",
        ] {
            assert_eq!(owner(other), None, "{other:?}");
        }
    }

    #[test]
    fn drop_programs_drop_the_given_share_of_the_u32_range() {
        assert_eq!(
            drop_program(50.0),
            "4,32 0 0 4294963256,53 1 0 2147483648,6 0 0 2,6 0 0 0"
        );
        assert_eq!(
            drop_program(0.0),
            "4,32 0 0 4294963256,53 1 0 0,6 0 0 2,6 0 0 0"
        );
        assert_eq!(drop_program(100.0), "1,6 0 0 2");
        assert_eq!(
            drop_program(1.0),
            "4,32 0 0 4294963256,53 1 0 42949673,6 0 0 2,6 0 0 0"
        );
    }

    #[test]
    fn host_names_must_be_short_and_plain() {
        for bad in ["", "-a", "A", "a_b", "a.b", "a b", &"x".repeat(25)] {
            assert!(
                std::panic::catch_unwind(|| check_host_name(bad)).is_err(),
                "{bad:?}"
            );
        }
        check_host_name("master-1");
        check_host_name(&"x".repeat(24));
    }

    #[test]
    fn lab_octets_differ_between_neighbouring_labs() {
        assert_ne!(lab_octet(1000, 0), lab_octet(1000, 1));
        assert_ne!(lab_octet(1000, 0), lab_octet(1001, 0));
        assert_eq!(lab_octet(u32::MAX, 1), 0);
    }

    #[test]
    fn two_hosts_ping_each_other_but_not_an_absent_address() {
        let Some(mut lab) = lab_or_skip() else { return };
        let a = lab.add_host("a");
        let b = lab.add_host("b");
        assert_eq!(a.ip().octets()[3], 1);
        assert_eq!(b.ip().octets()[3], 2);
        assert_eq!(a.ip().octets()[..3], b.ip().octets()[..3]);
        assert!(a.ping(b.ip(), TIMEOUT), "a cannot ping b");
        assert!(b.ping(a.ip(), TIMEOUT), "b cannot ping a");
        assert!(a.ping(a.ip(), TIMEOUT), "a cannot ping itself");
        let absent = Ipv4Addr::new(10, 77, a.ip().octets()[2], 200);
        assert!(!a.ping(absent, Duration::from_millis(600)));
        assert_eq!(lab.hosts(), [a, b]);
    }

    #[test]
    fn commands_and_their_children_run_in_the_host() {
        let Some(mut lab) = lab_or_skip() else { return };
        let a = lab.add_host("a");
        let mut cmd = Command::new("ip");
        cmd.args(["-4", "-o", "addr", "show", "dev", HOST_IF]);
        let out = a.run(cmd, TIMEOUT);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("{}/24", a.ip())), "{text}");
        // The host's namespace is not this process's.
        let ns_id = |path: &str| std::fs::metadata(path).map(|m| m.ino());
        let host_ns = ns_id(&format!("{NETNS_DIR}/{}", a.netns())).unwrap();
        assert_ne!(ns_id("/proc/self/ns/net").unwrap(), host_ns);
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 600 & echo up; wait"]);
        let proc = a.spawn(cmd, dir.path(), "sleeper");
        crate::wait_for_log(proc.stdout_path(), "up", TIMEOUT);
        assert!(wait_until(TIMEOUT, || proc.pids().len() >= 2));
        for pid in proc.pids() {
            assert_eq!(
                ns_id(&format!("/proc/{pid}/ns/net")).unwrap(),
                host_ns,
                "{pid}"
            );
        }
    }

    #[test]
    fn a_listener_is_reachable_until_its_link_is_cut_and_again_after_restore() {
        let Some(mut lab) = lab_or_skip() else { return };
        let a = lab.add_host("a");
        let b = lab.add_host("b");
        let listener = a.within(|| TcpListener::bind((a.ip(), 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(b.connects(addr, TIMEOUT), "b cannot reach {addr}");
        lab.cut_link(&a);
        assert!(
            !b.connects(addr, Duration::from_secs(1)),
            "reached a cut host"
        );
        assert!(!b.ping(a.ip(), Duration::from_millis(600)));
        lab.restore_link(&a);
        assert!(
            b.connects(addr, TIMEOUT),
            "b cannot reach {addr} after restore"
        );
    }

    #[test]
    fn loss_drops_its_share_of_packets_and_zero_restores_the_link() {
        let Some(mut lab) = lab_or_skip() else { return };
        let a = lab.add_host("a");
        let b = lab.add_host("b");
        let listener = a.within(|| TcpListener::bind((a.ip(), 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(b.connects(addr, TIMEOUT));
        lab.set_loss(&a, 100.0);
        assert!(
            !b.connects(addr, Duration::from_secs(1)),
            "reached through 100% loss"
        );
        lab.set_loss(&a, 0.0);
        assert!(b.connects(addr, TIMEOUT), "loss 0 did not restore the link");
        lab.set_loss(&a, 0.0);

        // 50%: each datagram b sends crosses a's port once. 200 of them: a result outside
        // 60..=140 is 5.6 standard deviations away (odds below 1e-7).
        let receiver = a.within(|| UdpSocket::bind((a.ip(), 0))).unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let to = receiver.local_addr().unwrap();
        let sender = b.within(|| UdpSocket::bind((b.ip(), 0))).unwrap();
        let count = |n: usize| {
            for i in 0..n {
                sender.send_to(&(i as u32).to_be_bytes(), to).unwrap();
            }
            let mut got = 0;
            let mut buf = [0u8; 16];
            while receiver.recv_from(&mut buf).is_ok() {
                got += 1;
            }
            got
        };
        assert_eq!(count(100), 100, "datagrams lost without loss");
        lab.set_loss(&a, 50.0);
        let got = count(200);
        assert!(
            (60..=140).contains(&got),
            "{got} of 200 arrived at 50% loss"
        );
        lab.set_loss(&a, 0.0);
        assert_eq!(count(100), 100, "datagrams lost after loss was removed");
    }

    #[test]
    fn a_process_in_a_host_freezes_and_thaws() {
        let Some(mut lab) = lab_or_skip() else { return };
        let a = lab.add_host("a");
        let root = TempRoot::new();
        let mut cmd = Command::new("sh");
        // No fork after "up": every process of the tree shows as stopped when frozen.
        cmd.args(["-c", "sleep 600 & echo up; wait"]);
        let proc = a.spawn(cmd, &root.procs_dir(), "sleeper");
        crate::wait_for_log(proc.stdout_path(), "up", TIMEOUT);
        assert!(wait_until(TIMEOUT, || proc.pids().len() >= 2));
        proc.freeze();
        let pids = proc.pids();
        assert!(pids.len() >= 2, "{pids:?}");
        assert!(
            pids.iter().all(|p| state(*p) == Some('T')),
            "{pids:?} not all stopped"
        );
        proc.thaw();
        assert!(wait_until(TIMEOUT, || {
            proc.pids().iter().all(|p| state(*p) != Some('T'))
        }));
        assert!(proc.is_running());
    }

    #[test]
    fn namespaces_go_with_the_lab_after_a_panic_too_and_leftovers_are_swept() {
        let Some(mut lab) = lab_or_skip() else { return };
        let a = lab.add_host("a");
        let names = [a.netns().to_owned(), lab.hub.clone()];
        assert!(names.iter().all(|n| exists(n)));
        drop(lab);
        assert!(
            names.iter().all(|n| !exists(n)),
            "{names:?} left after drop"
        );

        let panicked = std::panic::catch_unwind(|| {
            let mut lab = Lab::new().unwrap();
            let host = lab.add_host("p");
            assert!(exists(host.netns()));
            panic!("{}", host.netns());
        })
        .unwrap_err();
        let netns = panicked.downcast_ref::<String>().unwrap();
        assert!(!exists(netns), "{netns} left after a panic");

        // A leftover of "this pid, another start time": its owner is gone.
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        let leftover = format!("{NAME_PREFIX}{pid}-{}-0-hub", start + 1);
        admin("ip", ["netns", "add", &leftover]);
        let live = Lab::new().unwrap();
        assert!(!exists(&leftover), "{leftover} not swept");
        assert!(exists(&live.hub), "the sweep took a live lab");
    }

    #[test]
    fn a_foreign_host_cannot_be_cut() {
        let Some(mut one) = lab_or_skip() else { return };
        let Some(mut two) = lab_or_skip() else { return };
        let _mine = one.add_host("a");
        let theirs = two.add_host("a");
        let refused = std::panic::catch_unwind(|| one.cut_link(&theirs)).unwrap_err();
        let message = refused.downcast_ref::<String>().unwrap();
        assert!(message.contains("is not of the lab"), "{message}");
        two.cut_link(&theirs);
    }
}
