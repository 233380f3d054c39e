//! `salt/wheel/minions.py`: the minions connected to this master.

use rmpv::Value;

use crate::error::WheelError;
use crate::registry::{Export, Invocation, Traits};

pub(crate) static EXPORTS: &[Export] = &[("minions.connected", connected, Traits::PLAIN)];

/// `minions.connected`: the ids of the accepted minions connected now
/// (`CkMinions.connected_ids`), sorted (Salt answers a set's order).
fn connected(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let mut ids = inv.host.connected();
    ids.sort();
    ids.dedup();
    Ok(Value::Array(ids.into_iter().map(Value::from).collect()))
}
