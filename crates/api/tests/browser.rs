//! The project's single-page app (`contrib/spa`: `index.html` as `rest_cherrypy: app`, the
//! directory as `static`) in headless Chromium against `halite-api` + a Halite master +
//! two minions: it logs in through the API, lists the minions (`GET /minions`), runs
//! `test.echo` (`POST /` `local`) and shows the result, all in the DOM Chromium dumps.
//!
//! Chromium is Debian's `chromium` package (`scripts/setup-tests` installs it). Without it
//! the test says so and returns, except under CI (`CI` set), where a missing browser
//! fails the test.

mod common;

use common::*;
use halite_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The single-page app's directory.
fn spa_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/spa")
}

/// The first `chromium` (or `chromium-browser`) on `PATH`.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|p| p.is_file())
}

/// `chromium --headless --dump-dom <url>`: the DOM once the page's fetches are done
/// (virtual time stands still while requests are pending, so the budget is spent only
/// once the page is idle).
fn dump_dom(browser: &Path, home: &Path, url: &str) -> String {
    let mut cmd = Command::new(browser);
    cmd.env("HOME", home)
        .arg("--headless")
        .arg("--no-sandbox")
        .arg("--disable-gpu")
        .arg("--disable-dev-shm-usage")
        .arg("--no-first-run")
        .arg(format!(
            "--user-data-dir={}",
            home.join("profile").display()
        ))
        .arg("--virtual-time-budget=30000")
        .arg("--dump-dom")
        .arg(url);
    let out = run_command(cmd, TIMEOUT);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "chromium failed: {:?}\n{dom}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

#[test]
fn the_single_page_app_logs_in_lists_minions_and_shows_a_job_result_in_chromium() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed, and CI must run this test (Debian's chromium package)"
        );
        eprintln!(
            "the_single_page_app_logs_in_lists_minions_and_shows_a_job_result_in_chromium: \
             not run: no chromium on PATH (apt-get install chromium)"
        );
        return;
    };
    let spa = spa_dir().canonicalize().expect("contrib/spa");
    let rest = format!(
        "  app: {}\n  static: {}\n",
        spa.join("index.html").display(),
        spa.display()
    );
    let fleet = Fleet::start(&["m1", "m2"], &rest);
    let home = fleet.root.path().join("browser-home");
    std::fs::create_dir_all(&home).unwrap();

    let url = format!(
        "http://127.0.0.1:{}/app#username=alice&password=alicepw&eauth=file",
        fleet.port
    );
    let dom = dump_dom(&browser, &home, &url);
    println!("{dom}");
    assert!(
        dom.contains(r#"data-state="done""#),
        "the app did not finish:\n{dom}"
    );
    for id in ["m1", "m2"] {
        assert!(
            dom.contains(&format!(r#"<li data-minion="{id}">{id}"#)),
            "{id} is not listed:\n{dom}"
        );
        assert!(
            dom.contains(&format!(
                r#"<tr data-minion="{id}"><td>{id}</td><td class="return">hello from the browser</td></tr>"#
            )),
            "{id}'s job result is not shown:\n{dom}"
        );
    }
}
