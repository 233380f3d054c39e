//! The master's wheel functions of Salt 3008.3 — `key.*`, `minions.connected`,
//! `config.values` — run as the master's clear `wheel` command runs them
//! (`ClearFuncs.wheel` → `WheelClient.call_func` → `SyncClientMixin.low`). This is what
//! salt-api's `wheel` clients and `/keys` call, and SaltGUI's key page.
//!
//! # What it does
//!
//! * [`Registry::run`] is `SyncClientMixin.low` minus the process: it looks the function
//!   up, takes its arguments from the load ([`WheelArgs`]: `func(*arg, **kwarg)`, or
//!   Salt's `format_call` over the load's own fields, with `SaltInvocationError`'s texts),
//!   fires `salt/wheel/<jid>/new` (`fun: "wheel.<f>"`, `jid`, `user`, `fun_args`), runs
//!   the function, stores the run in the job cache as Salt's `store_job` does, and fires
//!   `salt/wheel/<jid>/ret` with `return` and `success` (and `retcode` when it raised).
//!   [`reply`] is the clear command's answer, `{"tag": "salt/wheel/<jid>", "data": {"fun",
//!   "jid", "tag", "user", "return", "success"}}`.
//! * `key.*` on `halite-keystore`, with the semantics stock `salt-key` and `halite-key`
//!   share (its `glob_match`, `select`, `apply`, `dict_match`, fingerprints): `list`,
//!   `list_all`, `glob_match`/`name_match`, `accept`, `reject`, `delete` and their
//!   `*_dict` forms, `print`, `finger`, `finger_master`, `master_key_str`, `gen`,
//!   `gen_accept`, `gen_keys`, `gen_signature`, with Salt's return shapes. A state change
//!   fires `salt/key` per key as `Key.change_state`/`delete_key` do (`{result: True, act,
//!   id[, pub]}`, `act` `accepted`, `rejected` or `delete`), then tells the host
//!   ([`WheelHost::keys_changed`]) so the master re-reads its key index and, when an
//!   accepted key went away, rotates its AES key.
//! * `minions.connected` (the host's connected minions) and `config.values` (the master
//!   configuration read again from its file, every option with Salt's defaults, as
//!   `salt.config.master_config` gives it).
//! * Signatures and docstrings come from the stock sources (`tools/gen_specs.py`
//!   generates `specs.rs`); binding and Python's texts are `halite-pycall`'s.
//!
//! # What it does not do
//!
//! * No I/O of its own beyond the pki directory and the configuration file: events, the
//!   job store, the connected minions and the key-change hook go through the
//!   [`WheelHost`] the master implements. Authentication and ACLs (`@wheel`, `@wheels`,
//!   `@key`) are the master's; so is where a call runs ([`Registry::is_slow`] names the
//!   ones that generate keys).
//! * Wheel modules other than `key`, `minions` and `config.values` (`config.apply`,
//!   `config.update_config`, `file_roots.*`, `pillar_roots.*`, `error.error`) are missing
//!   functions. There is no `key.check_master` in 3008.3's wheel (it is a method of
//!   `salt.key.Key`); `key.print` is the wheel name of `key_str`.
//! * No proc file (`cachedir/proc/<jid>`), no `minion_data_cache` cleanup after a
//!   delete or reject (the master's grains only count for accepted minions), no
//!   `revoke_auth`.
//!
//! # Deviations from Salt
//!
//! Each is also documented where it is implemented.
//!
//! * An unknown function or a load whose fields do not fit the signature returns Salt's
//!   intended `Exception occurred in wheel <f>: ... CommandExecutionError/SaltInvocationError`
//!   text; Salt 3008.3 loses it to an `UnboundLocalError` (`proc_fn`) raised in its
//!   `finally` block.
//! * Bad arguments (a Python `TypeError`) report `success: false`; Salt reports `true`.
//! * The private key `key.gen` and `key.gen_accept` return goes to the caller only: the
//!   `ret` event and the job cache get `priv` replaced by [`REDACTED`] (Salt puts it on
//!   the event bus, which the event journal, salt-api's `/events` and local ACL users
//!   read, and in the job cache).
//! * `key.gen_accept` looks for an existing key before generating a pair, not after;
//!   `keysize` below 2048 is raised to 2048 (what the docstrings promise; Salt generates
//!   any size the library takes) and above 32768 refused (salt-key's limit).
//! * `key.gen_keys` returns the new public key's fingerprint, as it means to (Salt 3008.3
//!   raises `AttributeError` after writing the files); `key.gen_signature` follows
//!   `halite-key --gen-signature` (the default signing key is `<master_sign_key_name>.pem`,
//!   `auto_create` never replaces an existing pair).
//! * A `*_dict` `match` whose value is a string is one id (Salt iterates its characters:
//!   `delete_dict({"minions": "web1"})` deletes keys `w`, `e`, `b` and `1`), and an id
//!   listed there that has no key is skipped without an event (Salt raises `TypeError`
//!   for accept and reject).
//! * A list `match` is joined with commas (an item holding a comma is several globs).
//! * Keys are returned and fired in `clean_key` form, as `halite-keystore` stores them.
//!
//! # Invariants
//!
//! * No load, argument value or file content makes a wheel call panic; every failure
//!   becomes Salt's return text.
//! * Minion keys are only read or written through `halite-keystore`, so no id reaches
//!   outside the pki directory. (The directories and files `gen_keys` and
//!   `gen_signature` are given are the caller's to name, as in Salt; key and signature
//!   file names are still checked, and nothing existing is overwritten.)

mod args;
mod error;
mod modules;
mod registry;
mod spec;
#[rustfmt::skip]
mod specs;
#[cfg(test)]
mod testhost;
#[cfg(test)]
mod tests;

use halite_proto::value::{get_str, map, s};

pub use args::{WheelArgs, CLIENT_INTERNAL_KEYWORDS};
pub use registry::{Registry, REDACTED};
pub use rmpv::Value;

/// What the wheel functions need from the master.
pub trait WheelHost: Send + Sync {
    /// The master's pki directory.
    fn keys(&self) -> &halite_keystore::KeyStore;
    /// Fires an event on the master bus.
    fn fire(&self, tag: &str, data: Value);
    /// Minions connected now (Salt's `connected_ids`).
    fn connected(&self) -> Vec<String>;
    /// The master's options (`pki_dir`, `id`, `hash_type`, `keysize`, `conf_file`, ...).
    fn opts(&self) -> &halite_config::MasterConfig;
    /// The master's job store, where wheel runs are saved.
    fn jobs(&self) -> &dyn halite_jobcache::JobStore;
    /// Called once after a call changed the state of keys (accepted, rejected, deleted,
    /// generated): the master re-reads its key index, and when an accepted key went away
    /// drops its session and rotates the AES key (what `salt-key`'s `rotate_aes_key`
    /// dropfile asks of a stock master).
    fn keys_changed(&self);
}

/// One wheel call.
#[derive(Debug, Clone, PartialEq)]
pub struct WheelCall<'a> {
    /// `module.function`.
    pub fun: &'a str,
    /// The arguments.
    pub args: WheelArgs,
    /// Who runs it (the events' `user`).
    pub user: &'a str,
    /// The call's jid (the events are `salt/wheel/<jid>/...`).
    pub jid: &'a str,
}

/// What a wheel call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct WheelOutcome {
    /// `return`.
    pub ret: Value,
    /// `success`.
    pub success: bool,
    /// `retcode`, present when the call raised.
    pub retcode: Option<i64>,
}

/// `ClearFuncs.wheel`'s answer: `{"tag": "salt/wheel/<jid>", "data": {"fun":
/// "wheel.<f>", "jid", "tag", "user", "return", "success"}}`.
pub fn reply(call: &WheelCall<'_>, outcome: &WheelOutcome) -> Value {
    let tag = format!("salt/wheel/{}", call.jid);
    map([
        ("tag", s(tag.clone())),
        (
            "data",
            map([
                ("fun", s(format!("wheel.{}", call.fun))),
                ("jid", s(call.jid)),
                ("tag", s(tag)),
                ("user", s(call.user)),
                ("return", outcome.ret.clone()),
                ("success", Value::Boolean(outcome.success)),
            ]),
        ),
    ])
}

/// The jid a load asks for with `__jid__` (salt-api's `wheel_async` picks one and
/// answers it before the call is made): a well-formed jid, not later than `latest` (the
/// jid the master would allocate now, so a caller cannot take one of its future jids),
/// that the job store does not know yet. `None` means the master uses its own.
///
/// Deviation: Salt's master always allocates its own, so the jid `wheel_async` answered
/// never appears in an event.
pub fn requested_jid(host: &dyn WheelHost, load: &Value, latest: &str) -> Option<String> {
    let jid = get_str(load, "__jid__")?;
    if !halite_proto::jid::is_jid(jid) || jid > latest {
        return None;
    }
    match host.jobs().get_load(jid) {
        Ok(None) => Some(jid.to_owned()),
        _ => None,
    }
}
