//! `halite-master` started on a configuration with misspelt options warns about each at
//! start-up, naming the file that set it and the closest valid name, and still starts.

use halite_testkit::{start_halite_master, wait_for_log, TempRoot};
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

/// Waits for `message` in the log at `log` and checks its line is a WARNING.
fn assert_warned(log: &Path, message: &str) {
    wait_for_log(log, message, WAIT);
    let text = std::fs::read_to_string(log).unwrap();
    let line = text.lines().find(|l| l.contains(message)).unwrap();
    assert!(line.contains("[WARNING ]"), "not a warning: {line}");
}

#[test]
fn halite_master_warns_about_misspelt_options_in_master_and_master_d() {
    let root = TempRoot::with_master_extra("publish_prot: 4505\n");
    let conf = root.master_config_dir().join("master.d/50-acl.conf");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(&conf, "publisher_acls: {fred: [test.ping]}\n").unwrap();
    let _master = start_halite_master(&root);
    let log = root.master_log();
    assert_warned(
        &log,
        &format!(
            "Unknown option 'publish_prot' in {} (did you mean 'publish_port'?)",
            root.master_config_file().display()
        ),
    );
    assert_warned(
        &log,
        &format!(
            "Unknown option 'publisher_acls' in {} (did you mean 'publisher_acl'?)",
            conf.display()
        ),
    );
    wait_for_log(&log, "The Salt Master is ready", WAIT);
}
