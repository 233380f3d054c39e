//! The runner modules, one file per Salt module.

pub(crate) mod acl;
pub(crate) mod jobs;
pub(crate) mod manage;
pub(crate) mod test;

use crate::registry::Export;

/// Every function of every module.
pub(crate) fn exports() -> impl Iterator<Item = &'static Export> {
    [acl::EXPORTS, jobs::EXPORTS, manage::EXPORTS, test::EXPORTS]
        .into_iter()
        .flatten()
}
