//! Usage errors exit as stock `salt` exits: an unknown option with optparse's 64, a
//! command line without a target and function with 42.

use halite_testkit::*;
use std::time::Duration;

#[test]
fn usage_errors_exit_with_stock_salts_codes() {
    let root = TempRoot::new();
    let dir = root.master_config_dir().to_str().unwrap().to_owned();
    for (args, code) in [
        (vec!["--no-such-option", "*", "test.ping"], 64),
        (vec!["*"], 42),
        (vec![], 42),
    ] {
        let mut all = vec!["-c", dir.as_str()];
        all.extend(&args);
        let halite = run(halite_bin("halite"), &all, Duration::from_secs(60));
        let stock = run(stock_bin("salt"), &all, Duration::from_secs(60));
        assert_eq!(
            (halite.status.code(), stock.status.code()),
            (Some(code), Some(code)),
            "halite and stock salt {args:?}"
        );
    }
}
