//! The Debian packages as an administrator gets them (issue 14, item 3).
//!
//! `scripts/package --dev --no-build` packages the debug binaries the suite already built
//! (`cargo build --workspace --bins`; a release build would add minutes to every CI run),
//! `dpkg -x` unpacks `halite` and `halite-salt-compat` into a scratch root, and then:
//! - the files are where Debian and Salt put them, `/etc/salt` files are conffiles, the
//!   maintainer scripts parse, the compat symlinks resolve inside the root, and the bash
//!   completions complete;
//! - the units verify with `systemd-analyze verify --root` (offline: systemd need not be
//!   PID 1; the host's targets and slices are copied into the root for the dependencies
//!   the units name) and say what the service needs;
//! - the installed `halite-master`, `halite-minion` and `halite-api`, configured by the
//!   packaged `/etc/salt` files plus a `master.d`/`minion.d` drop-in that moves `root_dir`
//!   into the scratch root (and gives the API a `rest_cherrypy:` section on a loopback
//!   port), send READY=1 on `$NOTIFY_SOCKET` (the master with its ports bound, the API
//!   listening: `GET /` answers 200), write their pidfiles, answer `test.ping` through the
//!   installed `halite-key`, `halite` and the compat `salt` name, and on SIGTERM send
//!   STOPPING=1, exit 0 and remove their pidfiles.
//!
//! Needs cargo-deb, dpkg and systemd-analyze (scripts/setup-tests installs them).

use halite_testkit::{
    assert_success, current_user, free_ports, halite_bin, json_returns, repo_root, run_command,
    wait_until, Proc, TIMEOUT,
};
use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds both packages from the debug binaries next to this test; returns their paths.
fn build_packages(out: &Path) -> (PathBuf, PathBuf) {
    let master = halite_bin("halite-master");
    let profile_dir = master.parent().expect("binary dir");
    assert_eq!(
        profile_dir.file_name().and_then(|n| n.to_str()),
        Some("debug"),
        "this test packages the debug build (scripts/package --dev)"
    );
    halite_bin("halite-docgen");
    let target_dir = profile_dir.parent().expect("target dir");
    let mut cmd = Command::new(repo_root().join("scripts/package"));
    cmd.args(["--dev", "--no-build", "--out"])
        .arg(out)
        .env("CARGO_TARGET_DIR", target_dir);
    let stdout = assert_success(
        "scripts/package --dev --no-build",
        &run_command(cmd, TIMEOUT),
    );
    let debs: Vec<PathBuf> = stdout.lines().map(PathBuf::from).collect();
    let [main, compat] = debs.as_slice() else {
        panic!("scripts/package printed {debs:?}, expected two package paths");
    };
    assert!(main.ends_with(format!("halite_{}-1_amd64.deb", env!("CARGO_PKG_VERSION"))));
    assert!(compat.ends_with(format!(
        "halite-salt-compat_{}-1_amd64.deb",
        env!("CARGO_PKG_VERSION")
    )));
    (main.clone(), compat.clone())
}

fn run_ok(program: &str, args: &[&std::ffi::OsStr]) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args);
    assert_success(&format!("{program} {args:?}"), &run_command(cmd, TIMEOUT))
}

fn os(s: &(impl AsRef<std::ffi::OsStr> + ?Sized)) -> &std::ffi::OsStr {
    s.as_ref()
}

fn unpack(deb: &Path, root: &Path) {
    run_ok("dpkg", &[os("-x"), os(deb), os(root)]);
}

fn control_file(deb: &Path, name: &str, scratch: &Path) -> String {
    let dir = scratch.join(format!(
        "control-{}",
        deb.file_name().and_then(|n| n.to_str()).unwrap_or("deb")
    ));
    run_ok("dpkg-deb", &[os("-e"), os(deb), os(&dir)]);
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn check_files(root: &Path, main: &Path, compat: &Path, scratch: &Path) {
    for bin in [
        "halite-master",
        "halite-minion",
        "halite",
        "halite-key",
        "halite-call",
        "halite-run",
        "halite-api",
    ] {
        let path = root.join("usr/bin").join(bin);
        let version = run_ok(path.to_str().expect("utf-8 path"), &[os("--version")]);
        assert!(
            version.contains(env!("CARGO_PKG_VERSION")),
            "{bin}: {version}"
        );
        for doc in [
            format!("usr/share/bash-completion/completions/{bin}"),
            format!("usr/share/zsh/vendor-completions/_{bin}"),
            format!("usr/share/fish/vendor_completions.d/{bin}.fish"),
        ] {
            let text =
                std::fs::read_to_string(root.join(&doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
            assert!(text.contains(bin), "{doc} does not name {bin}");
        }
        let man = root.join(format!("usr/share/man/man1/{bin}.1.gz"));
        let page = run_ok("gzip", &[os("-dc"), os(&man)]);
        assert!(page.contains(&format!(".TH {bin} 1")), "{}", man.display());
        // The compat names lead to the same programs, inside the root.
        let salt_name = bin.replacen("halite", "salt", 1);
        let link = root.join("usr/bin").join(&salt_name);
        assert_eq!(
            std::fs::canonicalize(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display())),
            std::fs::canonicalize(&path).expect("binary")
        );
        let man_link = root.join(format!("usr/share/man/man1/{salt_name}.1.gz"));
        assert!(man_link.is_file(), "{}", man_link.display());
    }
    for unit in ["master", "minion", "api"] {
        let alias = root.join(format!("usr/lib/systemd/system/salt-{unit}.service"));
        assert_eq!(
            std::fs::read_link(&alias).expect("alias"),
            Path::new(&format!("halite-{unit}.service"))
        );
    }
    // /etc/salt as Salt's packages lay it out; the daemons make pki/ and the rest.
    for conf in ["master", "minion"] {
        let text = std::fs::read_to_string(root.join("etc/salt").join(conf)).expect("config");
        assert!(text.contains(&format!("{conf}.d/")), "etc/salt/{conf}");
    }
    let conffiles = control_file(main, "conffiles", scratch);
    assert_eq!(
        conffiles.lines().collect::<Vec<_>>(),
        ["/etc/salt/master", "/etc/salt/minion"]
    );
    let postinst = control_file(main, "postinst", scratch);
    assert!(postinst.contains("mkdir -p /etc/salt/master.d /etc/salt/minion.d"));
    for unit in ["master", "minion", "api"] {
        assert!(
            postinst.contains(&format!(
                "deb-systemd-helper update-state halite-{unit}.service"
            )),
            "{postinst}"
        );
    }
    let control = control_file(compat, "control", scratch);
    assert!(
        control.contains("Conflicts: salt-master, salt-minion, salt-api, salt-common"),
        "{control}"
    );
    assert!(control.contains("Depends: halite"), "{control}");
    for script in ["postinst", "prerm", "postrm"] {
        let text = control_file(main, script, scratch);
        let path = scratch.join(format!("{script}.sh"));
        std::fs::write(&path, text).expect("script");
        run_ok("sh", &[os("-n"), os(&path)]);
    }
}

/// What bash's programmable completion offers for `words` (the last one being completed)
/// with the packaged completion file of `program`.
fn bash_completions(root: &Path, program: &str, words: &[&str]) -> Vec<String> {
    let file = root
        .join("usr/share/bash-completion/completions")
        .join(program);
    let function = format!("_{}", program.replace('-', "__"));
    let script = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; {function} {program} '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file.display(),
        words.join(" "),
        words.len() - 1,
        words[words.len() - 1],
        words[words.len().saturating_sub(2)],
    );
    run_ok("bash", &[os("-c"), os(&script)])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn verify_units(root: &Path) {
    let units = root.join("usr/lib/systemd/system");
    // The targets and slices the units depend on (implicitly or by name) come from the
    // host's systemd; usr/local is not a path the package uses.
    let host_units = root.join("usr/local/lib/systemd/system");
    std::fs::create_dir_all(&host_units).expect("unit dir");
    for entry in std::fs::read_dir("/usr/lib/systemd/system").expect("host units") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        if !(name.ends_with(".target") || name.ends_with(".slice")) {
            continue;
        }
        let copy = host_units.join(&name);
        match std::fs::read_link(&path) {
            Ok(target) => std::os::unix::fs::symlink(target, &copy).expect("symlink"),
            Err(_) => {
                std::fs::copy(&path, &copy).expect("copy");
            }
        }
    }
    let mut cmd = Command::new("systemd-analyze");
    cmd.arg("verify")
        .arg("--man=no")
        .arg(format!("--root={}", root.display()))
        .args([
            "halite-master.service",
            "halite-minion.service",
            "halite-api.service",
            "salt-master.service",
            "salt-minion.service",
            "salt-api.service",
        ]);
    let out = run_command(cmd, TIMEOUT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Unknown keys and unparsable values are only warnings to systemd-analyze: any output
    // is a failure here.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify ({}):\n{stderr}",
        out.status
    );
    for (unit, prevent) in [("master", "78"), ("minion", "77 78"), ("api", "78")] {
        let text =
            std::fs::read_to_string(units.join(format!("halite-{unit}.service"))).expect("unit");
        for line in [
            "Type=notify".to_owned(),
            format!("ExecStart=/usr/bin/halite-{unit}"),
            "Restart=on-failure".to_owned(),
            format!("RestartPreventExitStatus={prevent}"),
            "WantedBy=multi-user.target".to_owned(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "halite-{unit}.service lacks {line}"
            );
        }
        assert!(
            !text.contains("StandardError="),
            "stderr goes to the journal"
        );
    }
    // The API starts after a master on the same host, but may front one elsewhere: it
    // orders itself after halite-master without pulling it in.
    let api = std::fs::read_to_string(units.join("halite-api.service")).expect("unit");
    assert!(
        api.lines()
            .any(|l| l == "After=network-online.target halite-master.service"),
        "halite-api.service is not ordered after halite-master"
    );
    for line in api.lines() {
        assert!(
            !(line.starts_with("Requires=")
                || line.starts_with("BindsTo=")
                || (line.starts_with("Wants=") && line.contains("halite-master"))),
            "halite-api.service pulls in the master: {line}"
        );
    }
}

/// A datagram socket standing in for systemd's notification socket.
struct NotifySocket {
    path: PathBuf,
    sock: UnixDatagram,
}

impl NotifySocket {
    fn bind(path: PathBuf) -> NotifySocket {
        let sock = UnixDatagram::bind(&path).expect("notify socket");
        sock.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        NotifySocket { path, sock }
    }

    fn next(&self, who: &str) -> String {
        let mut buf = [0u8; 256];
        let n = self
            .sock
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no notification from {who}: {e}"));
        String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned()
    }
}

fn start(root: &Path, program: &str, notify: &NotifySocket, logs: &Path) -> Proc {
    let mut cmd = Command::new(root.join("usr/bin").join(program));
    cmd.arg("-c")
        .arg(root.join("etc/salt"))
        .env("NOTIFY_SOCKET", &notify.path);
    Proc::spawn(cmd, logs, program)
}

/// One HTTP/1.0 exchange (no chunked bodies, the server closes) with the API on
/// loopback; returns the status code and the body.
fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("halite-api on port {port}: {e}"));
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {path}: no header end in {response:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: status line in {head:?}"));
    (status, body.to_owned())
}

fn pid_in(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.parse().ok()
}

fn cli(root: &Path, program: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(root.join("usr/bin").join(program));
    cmd.arg("-c").arg(root.join("etc/salt")).args(args);
    run_command(cmd, TIMEOUT)
}

fn ping(root: &Path, program: &str) -> Option<serde_json::Value> {
    let out = cli(
        root,
        program,
        &["pkg-minion", "test.ping", "--out", "json", "-t", "10"],
    );
    if !out.status.success() {
        return None;
    }
    json_returns(&out.stdout).get("pkg-minion").cloned()
}

#[test]
fn deb_installs_files_and_units_whose_daemons_answer_test_ping_from_the_installed_paths() {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let root = scratch.path().join("root");
    let (main, compat) = build_packages(&scratch.path().join("debs"));
    unpack(&main, &root);
    unpack(&compat, &root);

    check_files(&root, &main, &compat, scratch.path());
    assert!(
        bash_completions(&root, "halite", &["halite", "--ti"]).contains(&"--timeout".to_owned())
    );
    assert!(
        bash_completions(&root, "halite-key", &["halite-key", "--accept-a"])
            .contains(&"--accept-all".to_owned())
    );
    verify_units(&root);

    // The packaged /etc/salt files as they are, plus drop-ins moving everything under the
    // scratch root (Salt's layout below it: etc/salt/pki, var/cache/salt, var/run, ...).
    let ports = free_ports(3);
    let (publish_port, ret_port, api_port) = (ports[0], ports[1], ports[2]);
    // The API's section, and a file eauth user allowed test.ping for its local client.
    let eauth_users = scratch.path().join("eauth-users");
    std::fs::write(&eauth_users, "pkg:pkgpw\n").expect("eauth users");
    let api_conf = format!(
        "rest_cherrypy:\n  port: {api_port}\n  host: 127.0.0.1\n  disable_ssl: true\n\
         netapi_enable_clients: [local]\n\
         external_auth:\n  file:\n    ^filename: {}\n    ^filetype: text\n    pkg:\n      - test.ping\n",
        eauth_users.display()
    );
    let r = root.display();
    let user = current_user();
    for (dir, text) in [
        (
            "master.d",
            format!("root_dir: {r}\ninterface: 127.0.0.1\npublish_port: {publish_port}\nret_port: {ret_port}\nuser: {user}\n{api_conf}"),
        ),
        (
            "minion.d",
            format!("root_dir: {r}\nid: pkg-minion\nmaster: 127.0.0.1\nmaster_port: {ret_port}\nuser: {user}\nacceptance_wait_time: 1\nenable_fqdns_grains: false\n"),
        ),
    ] {
        let dir = root.join("etc/salt").join(dir);
        std::fs::create_dir_all(&dir).expect("drop-in dir");
        std::fs::write(dir.join("scratch.conf"), text).expect("drop-in");
    }
    let logs = scratch.path().join("procs");
    std::fs::create_dir_all(&logs).expect("logs");

    let master_notify = NotifySocket::bind(scratch.path().join("notify-master"));
    let mut master = start(&root, "halite-master", &master_notify, &logs);
    assert_eq!(master_notify.next("halite-master"), "READY=1");
    // READY=1 comes once the ports are bound.
    for port in [publish_port, ret_port] {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("READY=1 sent, but port {port} refuses: {e}"));
    }
    let master_pidfile = root.join("var/run/salt-master.pid");
    assert_eq!(pid_in(&master_pidfile), Some(master.pid()));
    assert!(root.join("etc/salt/pki/master/master.pem").is_file());

    // halite-api reads the same master config; READY=1 comes once it listens.
    let api_notify = NotifySocket::bind(scratch.path().join("notify-api"));
    let mut api = start(&root, "halite-api", &api_notify, &logs);
    assert_eq!(api_notify.next("halite-api"), "READY=1");
    let api_pidfile = root.join("var/run/salt-api.pid");
    assert_eq!(pid_in(&api_pidfile), Some(api.pid()));
    let (status, body) = http(api_port, "GET", "/", "");
    assert_eq!(status, 200, "GET / answered {body}");
    let welcome: serde_json::Value = serde_json::from_str(&body).expect("GET / body is JSON");
    assert_eq!(welcome["return"], "Welcome", "{body}");

    let minion_notify = NotifySocket::bind(scratch.path().join("notify-minion"));
    let mut minion = start(&root, "halite-minion", &minion_notify, &logs);
    assert_eq!(minion_notify.next("halite-minion"), "READY=1");
    let minion_pidfile = root.join("var/run/salt-minion.pid");
    assert_eq!(pid_in(&minion_pidfile), Some(minion.pid()));

    assert!(
        wait_until(TIMEOUT, || {
            let out = cli(&root, "halite-key", &["-l", "pre"]);
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l == "pkg-minion")
        }),
        "pkg-minion's key never reached the installed master"
    );
    assert_success(
        "halite-key -a",
        &cli(&root, "halite-key", &["-a", "pkg-minion", "-y"]),
    );
    assert!(root
        .join("etc/salt/pki/master/minions/pkg-minion")
        .is_file());
    assert!(
        wait_until(TIMEOUT, || ping(&root, "halite")
            == Some(serde_json::Value::Bool(true))),
        "the installed halite never got pkg-minion's test.ping"
    );
    assert_eq!(ping(&root, "salt"), Some(serde_json::Value::Bool(true)));
    // The installed API reaches the installed master and its minion.
    let (status, body) = http(
        api_port,
        "POST",
        "/run",
        r#"[{"client": "local", "tgt": "pkg-minion", "fun": "test.ping",
             "username": "pkg", "password": "pkgpw", "eauth": "file"}]"#,
    );
    assert_eq!(status, 200, "POST /run answered {body}");
    let run: serde_json::Value = serde_json::from_str(&body).expect("POST /run body is JSON");
    assert_eq!(
        run,
        serde_json::json!({"return": [{"pkg-minion": true}]}),
        "{body}"
    );

    assert!(api.stop().success(), "halite-api exit status");
    assert_eq!(api_notify.next("halite-api"), "STOPPING=1");
    assert!(!api_pidfile.exists(), "the API left its pidfile");

    assert!(minion.stop().success(), "halite-minion exit status");
    assert_eq!(minion_notify.next("halite-minion"), "STOPPING=1");
    assert!(!minion_pidfile.exists(), "the minion left its pidfile");
    assert!(master.stop().success(), "halite-master exit status");
    assert_eq!(master_notify.next("halite-master"), "STOPPING=1");
    assert!(!master_pidfile.exists(), "the master left its pidfile");
}
