//! Where the master's events go. The daemon wires this to its Salt-format bus; tests use a
//! recorder. Keeping it a trait keeps the request handlers free of socket details.

use halite_proto::Value;

/// A sink for master-bus events. `fire` never blocks on listeners.
pub trait EventSink: Send + Sync {
    /// Fires `data` (a map; `_stamp` is added by the bus) under `tag`.
    fn fire(&self, tag: &str, data: Value);
}

impl EventSink for halite_bus::BusHandle {
    fn fire(&self, tag: &str, data: Value) {
        if let Err(e) = halite_bus::BusHandle::fire(self, tag, data) {
            tracing::warn!(tag, error = %e, "Event not fired");
        }
    }
}
