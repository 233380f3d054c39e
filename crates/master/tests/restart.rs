//! Graceful master restarts under a fleet of Halite minions (issue 16, item 5): SIGTERM, the
//! master exits by itself, a new one starts on the same root; every minion signs in again
//! and answers `test.ping` within 3 s (asked again while silent), and no minion runs a job after
//! that job's timeout (before the fix, a minion now and then stayed silent for ~60 s after
//! a restart and then ran the jobs queued meanwhile, up to 44 s late).
//!
//! A client keeps publishing `test.ping` throughout (`--async`, a few a second), as users of
//! a fleet do, so jobs are published while minions are away: those are the ones a minion
//! could run late. Their timeout is Salt's default, 5 s. The check reads every `Executing
//! command test.ping with jid J` line of the minions' logs (they run with `TZ=UTC`, the zone
//! of jids) and compares its time with the jid's.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MINIONS: usize = 10;
const RESTARTS: usize = 20;
/// The bound of the issue: every minion answers within it after a restart (it is also the
/// CLI timeout, `-t`, of the pings that check it).
const BOUND: Duration = Duration::from_secs(3);
/// What a loaded 2-core CI machine may add to [`BOUND`] before the test fails (the figure
/// is printed as MEASURED either way).
const LOAD_SLACK: Duration = Duration::from_secs(2);
/// The timeout of the background jobs: Salt's default `timeout`. No job may run later.
const JOB_TIMEOUT: Duration = Duration::from_secs(5);
const READY: &str = "Minion is ready to receive requests!";

/// `halite-minion` for `id` with its log's times in UTC.
fn start_minion(root: &TempRoot, id: &str) -> Proc {
    let mut cmd = Command::new(halite_bin("halite-minion"));
    cmd.arg("-c").arg(root.add_minion(id)).env("TZ", "UTC");
    Proc::spawn(cmd, &root.procs_dir(), &format!("halite-minion-{id}"))
}

/// A `YYYY-MM-DD HH:MM:SS,mmm` log time or a 20-digit jid, as a UTC time.
fn parse_time(text: &str, format: &str) -> Option<chrono::NaiveDateTime> {
    chrono::NaiveDateTime::parse_from_str(text, format).ok()
}

/// Every `test.ping` a minion's log says it ran: (jid, how long after the jid's time).
fn runs(log: &Path) -> Vec<(String, chrono::TimeDelta)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (_, jid) = line.split_once("Executing command test.ping with jid ")?;
            let jid = jid.trim();
            let ran = parse_time(line.get(..23)?, "%Y-%m-%d %H:%M:%S,%3f")?;
            let published = parse_time(jid.get(..20)?, "%Y%m%d%H%M%S%6f")?;
            Some((jid.to_owned(), ran - published))
        })
        .collect()
}

#[test]
fn minions_answer_within_3_s_of_each_of_20_graceful_restarts_and_run_no_job_late() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let mut master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let ids: Vec<String> = (1..=MINIONS).map(|n| format!("mn-{n:02}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let _minions: Vec<Proc> = ids.iter().map(|id| start_minion(&root, id)).collect();
    wait_for_pings(&root, &id_refs);

    let stop = Arc::new(AtomicBool::new(false));
    let pinger = {
        let stop = stop.clone();
        let (dir, procs) = (root.master_config_dir().to_path_buf(), root.procs_dir());
        std::thread::spawn(move || {
            let mut sent = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let mut cmd = Command::new(halite_bin("halite"));
                cmd.arg("-c").arg(&dir).args(["*", "test.ping", "--async"]);
                let mut cli = Proc::spawn(cmd, &procs, "pinger");
                // A publish the stopping master took but never answered waits out the
                // CLI's request timeout: the next one goes out instead.
                if cli.wait_exit(Duration::from_secs(2)).is_some()
                    && cli.stdout().starts_with("Executed command with job ID: ")
                {
                    sent += 1;
                }
                // Paced so the CLI does not spin while the master is down.
                std::thread::sleep(Duration::from_millis(50));
            }
            sent
        })
    };

    let mut worst = Duration::ZERO;
    for round in 1..=RESTARTS {
        let offsets: Vec<u64> = ids
            .iter()
            .map(|id| file_len(&root.minion_log(id)))
            .collect();
        let status = master.stop();
        assert!(
            status.success(),
            "round {round}: the master did not exit by itself on SIGTERM: {status:?}"
        );
        master = start_halite_master(&root);
        wait_for_port(root.ret_port(), Duration::from_secs(30));
        let up = Instant::now();
        for (id, offset) in ids.iter().zip(offsets) {
            wait_for_log_from(&root.minion_log(id), offset, READY, JOIN);
        }
        let signed_in = up.elapsed();
        // A publish that goes out before a minion's publish connection to the new master
        // is up does not reach it (as with stock minions): the silent ones are asked again,
        // each time with a 1 s timeout, until the bound.
        let mut silent: Vec<&str> = id_refs.clone();
        let mut answers = Default::default();
        while !silent.is_empty() && up.elapsed() < BOUND + LOAD_SLACK {
            let targets = silent.join(",");
            answers = halite_json(&root, &["-L", &targets, "test.ping", "-t", "1"]);
            silent.retain(|id| answers.get(*id) != Some(&Value::Bool(true)));
        }
        let answered = up.elapsed();
        println!(
            "MEASURED restart {round}: every minion signed in again {:.2} s and answered test.ping {:.2} s after the new master's port opened",
            signed_in.as_secs_f64(),
            answered.as_secs_f64()
        );
        assert!(
            silent.is_empty(),
            "round {round}: {silent:?} did not answer test.ping within {:?} of the restart: {answers:?}",
            BOUND + LOAD_SLACK
        );
        assert!(
            signed_in <= BOUND,
            "round {round}: the minions took {signed_in:?} to sign in again (bound {BOUND:?})"
        );
        worst = worst.max(signed_in);
    }
    stop.store(true, Ordering::SeqCst);
    let sent = pinger.join().expect("the pinger thread");
    println!(
        "MEASURED {RESTARTS} restarts: slowest sign-in of all {MINIONS} minions {:.2} s; {sent} background jobs published",
        worst.as_secs_f64()
    );

    let late: Vec<(String, String, chrono::TimeDelta)> = ids
        .iter()
        .flat_map(|id| {
            runs(&root.minion_log(id))
                .into_iter()
                .map(move |(jid, after)| (id.clone(), jid, after))
        })
        .filter(|(_, _, after)| *after > chrono::TimeDelta::from_std(JOB_TIMEOUT).unwrap())
        .collect();
    let ran: usize = ids.iter().map(|id| runs(&root.minion_log(id)).len()).sum();
    println!(
        "MEASURED {ran} test.ping runs in the minions' logs, {} after their 5 s timeout",
        late.len()
    );
    assert!(ran > 0, "no test.ping run found in the minions' logs");
    assert!(
        late.is_empty(),
        "jobs ran after their timeout (minion, jid, delay): {late:?}"
    );
    drop(master);
}
