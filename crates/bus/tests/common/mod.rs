//! Helpers shared by the integration tests: start a bus, wait without measuring time.

#![allow(dead_code)] // Each test crate uses a different subset.

use halite_bus::{BusAddr, BusHandle, BusServer, BusSockets, DEFAULT_MAX_EVENT_SIZE};
use std::future::Future;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A bus running in the background.
pub struct Running {
    pub handle: BusHandle,
    pub pub_addr: BusAddr,
    pub pull_addr: BusAddr,
    pub cancel: CancellationToken,
    pub task: JoinHandle<()>,
}

pub async fn start(sockets: &BusSockets) -> Running {
    // Bus logs show with the test's output (RUST_LOG=halite_bus=debug for more).
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "halite_bus=info".into()),
        )
        .try_init();
    let server = BusServer::bind(sockets, DEFAULT_MAX_EVENT_SIZE)
        .await
        .expect("bind");
    let handle = server.handle();
    let (pub_addr, pull_addr) = (server.pub_addr().clone(), server.pull_addr().clone());
    let cancel = CancellationToken::new();
    let task = tokio::spawn(server.run(cancel.clone()));
    Running {
        handle,
        pub_addr,
        pull_addr,
        cancel,
        task,
    }
}

impl Running {
    pub async fn stop(self) {
        self.cancel.cancel();
        within("bus shutdown", self.task).await.expect("bus task");
    }
}

/// Guards against hangs only: a test that needs this long is broken, not slow.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(120), fut).await {
        Ok(v) => v,
        Err(_) => panic!("gave up waiting for {what}"),
    }
}

/// Waits until the bus has at least `n` subscribers (socket connections are registered
/// when the server accepts them, which may be after the client's connect returns).
pub async fn wait_subscribers(handle: &BusHandle, n: usize) {
    within("subscribers", async {
        while handle.subscriber_count() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}
