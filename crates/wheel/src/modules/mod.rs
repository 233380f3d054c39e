//! The wheel modules Halite implements.

pub(crate) mod config;
pub(crate) mod key;
pub(crate) mod minions;

use crate::registry::Export;

/// Every function of every module.
pub(crate) fn exports() -> impl Iterator<Item = &'static Export> {
    key::EXPORTS
        .iter()
        .chain(minions::EXPORTS)
        .chain(config::EXPORTS)
}
