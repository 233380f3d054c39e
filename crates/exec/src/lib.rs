//! Execution modules: the functions a minion runs (`test.*`, `cmd.*`, `grains.*`, `sys.*`,
//! `saltutil.*`, `status.*`), argument binding as Salt does it, and the return envelope.
//!
//! API contract (shared by the minion daemon and `halite-call`; implementation in progress):
//!
//! ```ignore
//! let registry = Registry::builtin();                 // every module Halite ships
//! let ctx = Context { .. };                            // id, grains, pillar, opts, jid, jobs
//! let ret: JobReturn = registry.execute(&ctx, "test.arg", &publish_arg_list);
//! // ret.ret (Value), ret.retcode (i64), ret.success (bool), ret.out (Option<String>)
//! ```
