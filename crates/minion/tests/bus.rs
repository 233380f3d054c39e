//! The minion serves its local event bus at Salt's socket paths, master or not.

use halite_proto::value::{self, map, s};
use halite_testkit::*;
use std::time::Duration;

#[test]
fn minion_bus_is_served_at_salts_socket_paths_before_any_master_answers() {
    let root = TempRoot::new();
    root.add_minion("b1");
    let _minion = start_halite_minion(&root, "b1");
    let sock_dir = root.minion_config_dir("b1").join("sock");
    let sockets = halite_bus::BusSockets::minion(&sock_dir, "sha256", "b1").unwrap();
    let (pub_addr, pull_addr) = (sockets.pub_addr.clone(), sockets.pull_addr.clone());
    let ready = wait_until(Duration::from_secs(30), || {
        [&pub_addr, &pull_addr]
            .iter()
            .all(|a| matches!(a, halite_bus::BusAddr::Unix(p) if p.exists()))
    });
    assert!(
        ready,
        "minion bus sockets never appeared in {}",
        sock_dir.display()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = halite_bus::BusClient::new(1 << 20);
        let mut listener = client.listen(&pub_addr, "halite/test").await.unwrap();
        client
            .fire(&pull_addr, "halite/test/event", map([("x", s("y"))]))
            .await
            .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .expect("no event")
            .unwrap()
            .expect("bus closed");
        assert_eq!(event.tag(), "halite/test/event");
        assert_eq!(value::get_str(event.data(), "x"), Some("y"));
    });
}
