//! A [`Host`] for unit tests: configuration from maps, fired events recorded.

use crate::{config_option, Host};
use halite_proto::value;
use halite_proto::Value;
use std::sync::Mutex;

/// Opts, grains and pillar as maps; `fire_master` records, or fails with `fire_error`.
pub(crate) struct FakeHost {
    pub opts: Value,
    pub grains: Value,
    pub pillar: Value,
    pub fire_error: Option<String>,
    fired: Mutex<Vec<(String, Value)>>,
}

impl FakeHost {
    pub fn with_opts(opts: Value) -> FakeHost {
        FakeHost {
            opts,
            grains: Value::Map(Vec::new()),
            pillar: Value::Map(Vec::new()),
            fire_error: None,
            fired: Mutex::new(Vec::new()),
        }
    }

    /// What was fired, in order.
    pub fn fired(&self) -> Vec<(String, Value)> {
        self.fired.lock().unwrap().clone()
    }
}

impl Host for FakeHost {
    fn config_option(&self, key: &str) -> Option<Value> {
        config_option(
            key,
            |k| value::get(&self.opts, k).cloned(),
            &self.grains,
            &self.pillar,
        )
    }

    fn fire_master(&self, tag: &str, data: Value) -> Result<(), String> {
        if let Some(e) = &self.fire_error {
            return Err(e.clone());
        }
        self.fired.lock().unwrap().push((tag.to_owned(), data));
        Ok(())
    }
}
