//! `salt/wheel/config.py`: the master configuration.

use halite_config::MasterConfig;
use rmpv::Value;

use crate::error::WheelError;
use crate::registry::{Export, Invocation, Traits};

pub(crate) static EXPORTS: &[Export] = &[("config.values", values, Traits::PLAIN)];

/// `config.values`: `salt.config.master_config(conf_file)` — the master's configuration
/// file read again now (so it shows edits made since the master started), every option
/// with Salt's defaults and derived values, in Salt's key order.
fn values(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let conf_file = &inv.host.opts().conf_file;
    MasterConfig::load_file(conf_file)
        .map(|cfg| cfg.raw)
        .map_err(|e| WheelError::exception("salt.exceptions.SaltConfigurationError", e.to_string()))
}
