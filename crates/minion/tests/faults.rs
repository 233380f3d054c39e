//! The minion's faults of issue 16, with real processes: a minion stopped mid-job finishes
//! and returns it (or keeps the return for the next start when the master is away); a
//! publish that reaches the minion late — queued while it was stopped or connecting, or
//! from before its last sign-in — never runs; a graceful master restart is followed within
//! about a second; a timeout names the master's address.

mod common;

use common::*;
use halite_proto::value;
use halite_proto::Value;
use halite_testkit::*;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long to wait for something that must not happen (a return of a dropped publish).
const QUIET: Duration = Duration::from_secs(3);

fn log_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A Halite master accepting every key, and Halite minions `ids` (with `extra` config)
/// answering pings.
fn fleet(ids: &[&str], extra: &str) -> (TempRoot, Proc, Vec<Proc>) {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let minions = ids
        .iter()
        .map(|id| {
            root.add_minion_with(id, extra);
            start_halite_minion(&root, id)
        })
        .collect();
    Cli::Halite.wait_for_pings(&root, ids);
    (root, master, minions)
}

/// SIGTERM to the minion process alone, as systemd sends it with Salt's unit
/// (`KillMode=process`): the job's own processes are left to finish. Waits for the exit.
fn terminate(minion: &mut Proc) -> std::process::ExitStatus {
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &minion.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill failed");
    minion
        .wait_exit(TIMEOUT)
        .unwrap_or_else(|| panic!("the minion did not exit after SIGTERM"))
}

/// Restarts the master of `root` gracefully (SIGTERM, then a new process).
fn restart_master(root: &TempRoot, master: &mut Proc) -> Instant {
    master.stop();
    let started = Instant::now();
    *master = start_halite_master(root);
    started
}

/// The jid `halite --async` printed.
fn async_jid(root: &TempRoot, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.push("--async");
    let out = run_halite(root, all);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.trim()
        .strip_prefix("Executed command with job ID: ")
        .unwrap_or_else(|| {
            panic!(
                "no jid in {text:?} ({})",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_owned()
}

/// Listens on the master bus of `root` for `salt/job/<jid>/ret/<id>`; the listener is
/// connected when this returns, and the event data comes through the receiver.
fn watch_return(root: &TempRoot, jid: &str, id: &str) -> mpsc::Receiver<Value> {
    let addr = halite_bus::BusSockets::master(&root.master_root().join("sock")).pub_addr;
    let tag = format!("salt/job/{jid}/ret/{id}");
    let (ready_tx, ready) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut listener = halite_bus::BusClient::new(1 << 20)
                .listen(&addr, &tag)
                .await
                .unwrap();
            ready_tx.send(()).unwrap();
            while let Ok(Some(event)) = listener.recv().await {
                if event.tag() == tag {
                    let _ = tx.send(event.data().clone());
                    return;
                }
            }
        });
    });
    ready
        .recv_timeout(JOIN)
        .expect("the master bus listener never connected");
    rx
}

#[test]
fn a_minion_stopped_mid_job_finishes_the_job_and_returns_it() {
    let (root, _master, mut minions) = fleet(&["s1"], "shutdown_job_timeout: 30\n");
    let log = root.minion_log("s1");
    let offset = file_len(&log);
    std::thread::scope(|scope| {
        let cli = scope.spawn(|| {
            Cli::Halite.json(&root, &["s1", "cmd.run", "sleep 4; echo done", "-t", "60"])
        });
        wait_for_log_from(&log, offset, "Starting a new job", JOIN);
        let stopping = Instant::now();
        let status = terminate(&mut minions[0]);
        let stopped_after = stopping.elapsed();
        let r = cli.join().unwrap();
        assert_eq!(
            r.get("s1"),
            Some(&serde_json::json!("done")),
            "the job's return never reached the CLI: {r:?}\n{}",
            log_tail(&log, 30)
        );
        assert!(status.success(), "the minion exited with {status}");
        println!("MEASURED minion stop with a 4 s job running: {stopped_after:?}");
    });
    let text = log_text(&log);
    assert!(text.contains("Waiting up to 30 s for 1 running job(s) to finish and return"));
    assert!(
        !text.contains("signal 15"),
        "the job was signalled:\n{text}"
    );
}

#[test]
fn a_return_the_master_cannot_take_while_the_minion_stops_is_sent_at_the_next_start() {
    let (root, mut master, mut minions) = fleet(&["k1"], "shutdown_job_timeout: 5\n");
    let log = root.minion_log("k1");
    let offset = file_len(&log);
    let jid = async_jid(&root, &["k1", "cmd.run", "sleep 2; echo kept"]);
    wait_for_log_from(&log, offset, "Starting a new job", JOIN);
    // The master hangs, then the minion is stopped while the job runs: the return gets no
    // answer during the shutdown wait.
    master.freeze();
    terminate(&mut minions[0]);
    master.stop();
    let text = log_text(&log);
    assert!(
        text.contains(&format!(
            "The return of job {jid} could not be sent while the minion stops"
        )),
        "{}",
        log_tail(&log, 30)
    );
    assert!(found_kept(&root, &jid), "no kept return for {jid}");

    master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let returns = watch_return(&root, &jid, "k1");
    let _minion = start_halite_minion(&root, "k1");
    let ret = returns
        .recv_timeout(JOIN)
        .unwrap_or_else(|_| panic!("the kept return never arrived\n{}", log_tail(&log, 30)));
    assert_eq!(value::get_str(&ret, "return"), Some("kept"), "{ret}");
    assert_eq!(value::get_str(&ret, "fun"), Some("cmd.run"), "{ret}");
    assert!(
        wait_until(JOIN, || !found_kept(&root, &jid)),
        "the kept return was not removed once sent"
    );
    drop(master);
}

/// Whether a kept return for `jid` is anywhere under the minion roots of `root`.
fn found_kept(root: &TempRoot, jid: &str) -> bool {
    fn walk(dir: &Path, jid: &str) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|e| {
            let p = e.path();
            (p.is_dir() && walk(&p, jid))
                || (p.file_name().is_some_and(|n| n == jid)
                    && p.parent().is_some_and(|d| d.ends_with("halite_returns")))
        })
    }
    walk(root.path(), jid)
}

#[test]
fn a_publish_queued_while_the_minion_was_stopped_across_a_master_restart_never_runs() {
    let (root, mut master, minions) = fleet(&["z1"], "publish_max_age: 2\n");
    let log = root.minion_log("z1");
    let marker = root.path().join("stale-job-ran");
    let minion = &minions[0];

    // The minion hangs; a job is published to it, the CLI gives up on it, and the master
    // restarts (new AES key). The publish waits in the minion's socket buffer.
    minion.freeze();
    let frozen = Instant::now();
    let touch = format!("touch {}", marker.display());
    let jid = async_jid(&root, &["z1", "cmd.run", &touch]);
    restart_master(&root, &mut master);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    // Longer than publish_max_age, whatever the restart took.
    while frozen.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let offset = file_len(&log);
    minion.thaw();

    wait_for_log_from(
        &log,
        offset,
        &format!("Dropping stale job {jid} (cmd.run)"),
        JOIN,
    );
    wait_for_log_from(&log, offset, "Minion is ready to receive requests!", JOIN);
    Cli::Halite.wait_for_pings(&root, &["z1"]);
    std::thread::sleep(QUIET);
    assert!(!marker.exists(), "the stale job ran");
    let text = log_text(&log);
    assert!(
        !text.contains(&format!("Executing command cmd.run with jid {jid}"))
            && !text.contains(&format!("Starting a new job {jid}")),
        "the stale job started:\n{}",
        log_tail(&log, 40)
    );
}

#[test]
fn publishes_queued_while_the_minion_connects_are_dropped_and_later_ones_run() {
    let root = TempRoot::new();
    root.add_minion_with("c1", "publish_max_age: 1\n");
    let mut master = FakeMaster::start(root.ret_port(), root.publish_port(), 0);
    // The master takes 3 s to answer the pillar request of the connecting minion, while
    // its publish socket already delivers jobs: the measured 60 s silence in small.
    master.hold_next_pillar(Duration::from_secs(3));
    let _minion = start_halite_minion(&root, "c1");
    master.wait_for_subscriber(JOIN);
    for jid in ["101", "102", "103"] {
        master.publish(&FakeMaster::job(jid, "test.ping", vec![]));
    }
    let log = root.minion_log("c1");
    wait_for_log(&log, "Minion is ready to receive requests!", JOIN);
    for jid in ["101", "102", "103"] {
        wait_for_log(&log, &format!("Dropping stale job {jid} (test.ping)"), JOIN);
    }
    master.publish(&FakeMaster::job("104", "test.ping", vec![]));
    let ret = master
        .next_return(JOIN)
        .expect("no return for a fresh publish");
    assert_eq!(value::get_str(&ret, "jid"), Some("104"));
    assert!(master.next_return(QUIET).is_none(), "a stale job returned");
}

#[test]
fn a_publish_under_the_key_a_sign_in_replaced_is_dropped_without_signing_in_again() {
    let root = TempRoot::new();
    root.add_minion("o1");
    let mut master = FakeMaster::start(root.ret_port(), root.publish_port(), 0);
    let _minion = start_halite_minion(&root, "o1");
    master.wait_for_subscriber(JOIN);
    let log = root.minion_log("o1");
    wait_for_log(&log, "Minion is ready to receive requests!", JOIN);

    let old = master.aes_key();
    master.rotate_aes();
    // The minion signs in again to read this one.
    master.publish(&FakeMaster::job("201", "test.ping", vec![]));
    let ret = master
        .next_return(JOIN)
        .expect("no return under the new key");
    assert_eq!(value::get_str(&ret, "jid"), Some("201"));
    let auths = master.auths();
    // A publish from before that sign-in arrives late.
    master.publish_under(&old, &FakeMaster::job("200", "test.ping", vec![]), 1000);
    wait_for_log(
        &log,
        "Dropping stale job 200 (test.ping) from master 127.0.0.1: it was published under the AES key of before the minion's last sign-in",
        JOIN,
    );
    assert!(master.next_return(QUIET).is_none(), "the old publish ran");
    assert_eq!(master.auths(), auths, "the minion signed in again for it");
    // Still serving.
    master.publish(&FakeMaster::job("202", "test.ping", vec![]));
    let ret = master
        .next_return(JOIN)
        .expect("no return after the old publish");
    assert_eq!(value::get_str(&ret, "jid"), Some("202"));
}

#[test]
fn minions_follow_a_graceful_master_restart_within_seconds() {
    let ids = ["r1", "r2", "r3"];
    let (root, mut master, _minions) = fleet(&ids, "");
    for round in 1..=3 {
        let offsets: Vec<u64> = ids
            .iter()
            .map(|id| file_len(&root.minion_log(id)))
            .collect();
        let started = restart_master(&root, &mut master);
        wait_for_port(root.ret_port(), Duration::from_secs(30));
        let up = started.elapsed();
        for (id, offset) in ids.iter().zip(offsets) {
            wait_for_log_from(
                &root.minion_log(id),
                offset,
                "Minion is ready to receive requests!",
                JOIN,
            );
            let ready = started.elapsed();
            println!(
                "MEASURED restart {round}: minion {id} ready {:.2} s after the new master started ({:.2} s after its port opened)",
                ready.as_secs_f64(),
                ready.saturating_sub(up).as_secs_f64()
            );
        }
        Cli::Halite.wait_for_pings(&root, &ids);
    }
}

#[test]
fn a_timed_out_sign_in_names_the_master_address() {
    let root = TempRoot::new();
    // Something listens but never answers.
    let silent = std::net::TcpListener::bind(("127.0.0.1", root.ret_port())).unwrap();
    root.add_minion_with("t1", "auth_timeout: 1\nauth_tries: 1\n");
    let _minion = start_halite_minion(&root, "t1");
    wait_for_log(
        &root.minion_log("t1"),
        &format!(
            "SaltReqTimeoutError: Message timed out: no reply to the sign-in from the master at tcp://127.0.0.1:{} (1 tries of 1 s)",
            root.ret_port()
        ),
        JOIN,
    );
    drop(silent);
}
