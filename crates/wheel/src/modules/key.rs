//! `salt/wheel/key.py`: the wheel face of `salt.key.Key`, over `halite-keystore`.
//!
//! Selections, state changes and fingerprints are `halite-keystore`'s (`glob_match`,
//! `select`, `apply`, `dict_match`, `key_fingerprint`), the same code `halite-key` runs,
//! so the wheel and salt-key agree. What is Salt's wheel only lives here: the return
//! shapes (a glob form answers `glob_match(match)` afterwards, a `*_dict` form
//! `dict_match(match)`), the `salt/key` events (`Key.change_state`, `Key.delete_key`:
//! `{result: True, act, id[, pub]}` per key, `act` the target directory's state name —
//! `accepted`, `rejected` — or `delete`), and the key generation of `gen*`.

use std::path::{Path, PathBuf};

use halite_keystore::{
    fnmatch, key_fingerprint, sort_ignorecase, Action, Include, KeyState, KeyStore, Matches,
};
use halite_output::py_type_name;
use halite_proto::pem::clean_key;
use halite_proto::rsa::{PrivateKey, PublicKey, SigAlgo};
use halite_proto::value::{map, s, truthy};
use halite_pycall::pyval::{dict_set, py_int, text};
use rmpv::Value;

use crate::error::WheelError;
use crate::registry::{Export, Invocation, Traits};

pub(crate) static EXPORTS: &[Export] = &[
    ("key.accept", accept, Traits::PLAIN),
    ("key.accept_dict", accept_dict, Traits::PLAIN),
    ("key.delete", delete, Traits::PLAIN),
    ("key.delete_dict", delete_dict, Traits::PLAIN),
    ("key.finger", finger, Traits::PLAIN),
    ("key.finger_master", finger_master, Traits::PLAIN),
    ("key.gen", gen, Traits::SECRET),
    ("key.gen_accept", gen_accept, Traits::SECRET),
    ("key.gen_keys", gen_keys, Traits::SLOW),
    ("key.gen_signature", gen_signature, Traits::SLOW),
    ("key.glob_match", glob_match, Traits::PLAIN),
    ("key.list", list, Traits::PLAIN),
    ("key.list_all", list_all, Traits::PLAIN),
    ("key.master_key_str", master_key_str, Traits::PLAIN),
    ("key.name_match", name_match, Traits::PLAIN),
    ("key.print", key_str, Traits::PLAIN),
    ("key.reject", reject, Traits::PLAIN),
    ("key.reject_dict", reject_dict, Traits::PLAIN),
];

/// The smallest key generated: what the docstrings promise (`keysize` below is raised).
const MIN_KEYSIZE: i64 = 2048;
/// The largest key generated (salt-key's `--keysize` limit).
const MAX_KEYSIZE: i64 = 32768;

// ----- helpers ---------------------------------------------------------------------------

/// The `TypeError` `fnmatch` or `os.path` raise for a value that is not text.
fn not_text(v: &Value) -> WheelError {
    WheelError::TypeError(format!(
        "expected str, bytes or os.PathLike object, not {}",
        py_type_name(v)
    ))
}

/// A glob `match`: a string (`a,b` is two globs), or a list of globs, joined with commas.
fn globs(v: &Value) -> Result<String, WheelError> {
    match v {
        Value::Array(items) => Ok(items
            .iter()
            .map(|i| text(i).map(|t| t.into_owned()).ok_or_else(|| not_text(i)))
            .collect::<Result<Vec<_>, _>>()?
            .join(",")),
        other => text(other)
            .map(|t| t.into_owned())
            .ok_or_else(|| not_text(other)),
    }
}

/// A list of ids as a value.
fn ids_value(ids: &[String]) -> Value {
    Value::Array(ids.iter().map(|i| s(i.as_str())).collect())
}

/// `{directory: [ids]}` in the order of the groups.
fn groups(m: &Matches) -> Value {
    Value::Map(
        m.iter()
            .map(|(state, ids)| (s(state.dir_name()), ids_value(ids)))
            .collect(),
    )
}

/// The key of `id` as `state`'s bank holds it: the denied key for denied, else the id's
/// key (`cache.fetch("keys", id)`, whatever its state).
fn key_text(store: &KeyStore, state: KeyState, id: &str) -> Result<Option<String>, WheelError> {
    Ok(match state {
        KeyState::Denied => store.get_denied(id)?,
        _ => store.get(id)?.map(|(_, pem)| pem),
    })
}

/// Fires `salt/key` as `Key.change_state` and `Key.delete_key` do.
fn fire_key(inv: &Invocation<'_>, act: &str, id: &str, pem: Option<&str>) {
    let mut data = vec![
        (s("result"), Value::Boolean(true)),
        (s("act"), s(act)),
        (s("id"), s(id)),
    ];
    if let Some(pem) = pem {
        data.push((s("pub"), s(pem)));
    }
    inv.host.fire("salt/key", Value::Map(data));
}

/// The state a `*_dict` status names (`minions`, `minions_pre`, ...).
fn state_named(status: &Value) -> Option<KeyState> {
    match text(status).as_deref()? {
        "minions" => Some(KeyState::Accepted),
        "minions_pre" => Some(KeyState::Pending),
        "minions_rejected" => Some(KeyState::Rejected),
        "minions_denied" => Some(KeyState::Denied),
        _ => None,
    }
}

/// A `*_dict` form's `match`: `(status, ids)` in order. Anything but a dict is no keys
/// (Salt's `isinstance(match_dict, dict)`); a string value is one id (Salt would iterate
/// its characters).
fn dict_entries(v: &Value) -> Result<Vec<(Value, Vec<String>)>, WheelError> {
    let Value::Map(entries) = v else {
        return Ok(Vec::new());
    };
    let mut dict = Vec::new();
    for (k, v) in entries {
        dict_set(&mut dict, k.clone(), v.clone());
    }
    dict.into_iter()
        .map(|(status, ids)| {
            let ids = match &ids {
                Value::Array(items) => items
                    .iter()
                    .map(|i| text(i).map(|t| t.into_owned()).ok_or_else(|| not_text(i)))
                    .collect::<Result<Vec<_>, _>>()?,
                Value::String(_) => vec![text(&ids).unwrap_or_default().into_owned()],
                other => {
                    return Err(WheelError::TypeError(format!(
                        "'{}' object is not iterable",
                        py_type_name(other)
                    )))
                }
            };
            Ok((status, ids))
        })
        .collect()
}

/// `Key.dict_match`: for every entry of the dict (whatever its status name), where the
/// listed ids (as globs) are now.
fn dict_match(store: &KeyStore, entries: &[(Value, Vec<String>)]) -> Result<Value, WheelError> {
    let mut found: Vec<(KeyState, Vec<String>)> = Vec::new();
    for (_, ids) in entries {
        let one = store.dict_match(&Matches::from_groups([(KeyState::Pending, ids.clone())]))?;
        found.extend(one.iter().map(|(state, ids)| (state, ids.to_vec())));
    }
    Ok(groups(&Matches::from_groups(found)))
}

/// What an accept or reject works on.
enum Selection {
    /// A glob (`accept`, `reject`).
    Glob(String),
    /// A dict of ids by status (`accept_dict`, `reject_dict`).
    Dict(Vec<(Value, Vec<String>)>),
}

/// `Key.change_state` for accept and reject: moves the selected keys from pending and
/// the included states, fires `salt/key` for each key moved (with its text as `pub`),
/// and answers where the selection is now.
fn change(inv: &Invocation<'_>, action: Action, selection: Selection) -> Result<Value, WheelError> {
    let store = inv.host.keys();
    let include = match action {
        Action::Accept => Include {
            accepted: false,
            rejected: truthy(inv.arg("include_rejected")),
            denied: truthy(inv.arg("include_denied")),
        },
        _ => Include {
            accepted: truthy(inv.arg("include_accepted")),
            rejected: false,
            denied: truthy(inv.arg("include_denied")),
        },
    };
    let selected = match &selection {
        Selection::Glob(pattern) => store.select(action, pattern, include)?,
        Selection::Dict(entries) => Matches::from_groups(
            entries
                .iter()
                .filter_map(|(status, ids)| Some((state_named(status)?, ids.clone()))),
        ),
    };
    // `Key.change_state`'s source directories, in its order; ids without a key are
    // skipped.
    let mut sources = vec![KeyState::Pending];
    if include.rejected {
        sources.push(KeyState::Rejected);
    }
    if include.denied {
        sources.push(KeyState::Denied);
    }
    if include.accepted {
        sources.push(KeyState::Accepted);
    }
    let mut moving = Vec::new();
    for source in sources {
        for id in selected.get(source) {
            if let Some(pem) = key_text(store, source, id)? {
                moving.push((id.clone(), pem));
            }
        }
    }
    let applied = store.apply(action, &selected, include)?;
    let act = match action {
        Action::Accept => "accepted",
        _ => "rejected",
    };
    let mut changed = false;
    for (id, pem) in &moving {
        if !applied.invalid.contains(id) {
            fire_key(inv, act, id, Some(pem));
            changed = true;
        }
    }
    if changed {
        inv.host.keys_changed();
    }
    match &selection {
        Selection::Glob(pattern) => Ok(groups(&store.glob_match(pattern)?)),
        Selection::Dict(entries) => dict_match(store, entries),
    }
}

/// `hash_type`, else the master's.
fn hash_type(inv: &Invocation<'_>) -> Result<String, WheelError> {
    match inv.arg("hash_type") {
        Value::Nil => Ok(inv.host.opts().hash_type.clone()),
        v => text(v).map(|t| t.into_owned()).ok_or_else(|| {
            WheelError::TypeError(format!(
                "attribute name must be string, not '{}'",
                py_type_name(v)
            ))
        }),
    }
}

/// What `getattr(hashlib, hash_type)` raises for a digest it does not have.
fn no_hash(hash: &str) -> WheelError {
    WheelError::exception(
        "AttributeError",
        format!("module 'hashlib' has no attribute '{hash}'"),
    )
}

/// `pem_finger(key=text)`: the digest of the whole stored text.
fn fingerprint(pem: &str, hash: &str) -> Result<String, WheelError> {
    key_fingerprint(pem, hash).map_err(|_| no_hash(hash))
}

/// A key size as `int()` reads it; a falsy one is the master's `keysize`. Below 2048 it
/// is raised to 2048; above 32768 refused.
fn keysize(v: &Value, fallback: u32) -> Result<u32, WheelError> {
    let n = if truthy(v) {
        py_int(v)?
    } else {
        i64::from(fallback)
    };
    if n > MAX_KEYSIZE {
        return Err(WheelError::exception(
            "ValueError",
            format!("The maximum value for keysize is {MAX_KEYSIZE}"),
        ));
    }
    u32::try_from(n.max(MIN_KEYSIZE))
        .map_err(|e| WheelError::exception("ValueError", e.to_string()))
}

/// `salt.crypt.gen_keys(keysize)`: a new pair as (PKCS#1 private PEM, SubjectPublicKeyInfo
/// public PEM).
fn generate(bits: u32) -> Result<(String, String), WheelError> {
    let key = PrivateKey::generate(bits).map_err(crypto_error)?;
    let private = key.to_pem().map_err(crypto_error)?;
    let public = key
        .public_key()
        .and_then(|p| p.to_pem())
        .map_err(crypto_error)?;
    Ok((private, public))
}

fn crypto_error(e: halite_proto::Error) -> WheelError {
    WheelError::exception("ValueError", e.to_string())
}

/// `InputSanitizer.id` (`hostname`): stripped, empty refused, then only `[a-zA-Z0-9.-]`
/// kept and dots stripped from both ends.
fn clean_id(v: &Value) -> Result<String, WheelError> {
    let raw = if !truthy(v) {
        String::new()
    } else {
        text(v).map(|t| t.into_owned()).ok_or_else(|| {
            WheelError::exception(
                "AttributeError",
                format!("'{}' object has no attribute 'strip'", py_type_name(v)),
            )
        })?
    };
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(WheelError::exception(
            "salt.exceptions.CommandExecutionError",
            "Empty value during sanitation",
        ));
    }
    let kept: String = trimmed
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
        .collect();
    Ok(kept.trim_matches('.').to_owned())
}

/// A text argument that may be left out (`None`, `""`): `Some(text)` when given.
fn given_text(v: &Value) -> Result<Option<String>, WheelError> {
    if !truthy(v) {
        return Ok(None);
    }
    text(v)
        .map(|t| Some(t.into_owned()))
        .ok_or_else(|| not_text(v))
}

fn os_error(path: &Path, e: std::io::Error) -> WheelError {
    WheelError::exception("OSError", format!("{}: {e}", path.display()))
}

// ----- listing ---------------------------------------------------------------------------

/// `Key.all_keys`: every state's ids, then the master's own key files as `local`.
fn all_keys(store: &KeyStore) -> Result<Value, WheelError> {
    let lists = store.list_all()?;
    Ok(map([
        ("minions_pre", ids_value(&lists.pending)),
        ("minions_rejected", ids_value(&lists.rejected)),
        ("minions", ids_value(&lists.accepted)),
        ("minions_denied", ids_value(&lists.denied)),
        ("local", ids_value(&store.local_keys()?)),
    ]))
}

/// `key.list_all`.
fn list_all(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    all_keys(inv.host.keys())
}

/// `key.list` (`Key.list_status`): the ids in the state `match` starts like (`acc`,
/// `pre`/`un`, `rej`, `den`), or `all_keys` for `all`, or `{}`.
fn list(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let m = inv.arg("match");
    let Some(m) = text(m) else {
        return Err(WheelError::exception(
            "AttributeError",
            format!("'{}' object has no attribute 'startswith'", py_type_name(m)),
        ));
    };
    let store = inv.host.keys();
    let lists = store.list_all()?;
    let one = |name: &str, ids: &[String]| map([(name, ids_value(ids))]);
    Ok(if m.starts_with("acc") {
        one("minions", &lists.accepted)
    } else if m.starts_with("pre") || m.starts_with("un") {
        one("minions_pre", &lists.pending)
    } else if m.starts_with("rej") {
        one("minions_rejected", &lists.rejected)
    } else if m.starts_with("den") {
        one("minions_denied", &lists.denied)
    } else if m.starts_with("all") {
        all_keys(store)?
    } else {
        Value::Map(Vec::new())
    })
}

/// `key.glob_match`: `{directory: [ids]}` of every key matching the glob.
fn glob_match(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let pattern = globs(inv.arg("match"))?;
    Ok(groups(&inv.host.keys().glob_match(&pattern)?))
}

/// `key.name_match`: the deprecated name of `glob_match`.
fn name_match(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    tracing::warn!(
        "'wheel.key.name_match' has been renamed to 'wheel.key.glob_match', and will be removed in the Calcium release.Please update your workflows to use glob_match instead."
    );
    glob_match(inv)
}

// ----- state changes ---------------------------------------------------------------------

/// `key.accept`: pending keys matching the glob (and rejected or denied ones with
/// `include_rejected`, `include_denied`) become accepted.
fn accept(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let pattern = globs(inv.arg("match"))?;
    change(inv, Action::Accept, Selection::Glob(pattern))
}

/// `key.accept_dict`: the ids listed under `minions_pre` (and `minions_rejected`,
/// `minions_denied` when included) become accepted.
fn accept_dict(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let entries = dict_entries(inv.arg("match"))?;
    change(inv, Action::Accept, Selection::Dict(entries))
}

/// `key.reject`: pending keys matching the glob (and accepted or denied ones with
/// `include_accepted`, `include_denied`) become rejected.
fn reject(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let pattern = globs(inv.arg("match"))?;
    change(inv, Action::Reject, Selection::Glob(pattern))
}

/// `key.reject_dict`: the dict form of `reject`.
fn reject_dict(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let entries = dict_entries(inv.arg("match"))?;
    change(inv, Action::Reject, Selection::Dict(entries))
}

/// `key.delete`: every key matching the glob, in any state, is removed; `salt/key`
/// `delete` per key.
fn delete(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let pattern = globs(inv.arg("match"))?;
    let store = inv.host.keys();
    let selected = store.select(Action::Delete, &pattern, Include::default())?;
    store.apply(Action::Delete, &selected, Include::default())?;
    let ids: Vec<&String> = selected.iter().flat_map(|(_, ids)| ids).collect();
    for id in &ids {
        fire_key(inv, "delete", id, None);
    }
    if !ids.is_empty() {
        inv.host.keys_changed();
    }
    Ok(groups(&store.glob_match(&pattern)?))
}

/// `key.delete_dict`: each listed id loses its denied key (under `minions_denied`) or its
/// key in whatever state it is (under any other status, as Salt's `flush("keys", id)`
/// does); `salt/key` `delete` for each listed id.
fn delete_dict(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let entries = dict_entries(inv.arg("match"))?;
    let store = inv.host.keys();
    // For a deletion only denied or not matters (`apply` removes an id's key from every
    // one of accepted, pending and rejected).
    let selected = Matches::from_groups(entries.iter().map(|(status, ids)| {
        let state = match state_named(status) {
            Some(KeyState::Denied) => KeyState::Denied,
            _ => KeyState::Accepted,
        };
        (state, ids.clone())
    }));
    store.apply(Action::Delete, &selected, Include::default())?;
    let mut changed = false;
    for (_, ids) in &entries {
        for id in ids {
            fire_key(inv, "delete", id, None);
            changed = true;
        }
    }
    if changed {
        inv.host.keys_changed();
    }
    dict_match(store, &entries)
}

// ----- key texts and fingerprints -------------------------------------------------------

/// `key.print` (`Key.key_str`): `{directory: {id: key text}}` of the keys matching the
/// glob.
fn key_str(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let store = inv.host.keys();
    let matches = store.glob_match(&globs(inv.arg("match"))?)?;
    let mut out = Vec::new();
    for (state, ids) in matches.iter() {
        let mut ids = ids.to_vec();
        sort_ignorecase(&mut ids);
        ids.dedup();
        let mut texts = Vec::new();
        for id in ids {
            if let Some(pem) = key_text(store, state, &id)? {
                texts.push((s(id), s(pem)));
            }
        }
        out.push((s(state.dir_name()), Value::Map(texts)));
    }
    Ok(Value::Map(out))
}

/// `key.finger` (`Key.finger`): `{directory: {id: fingerprint}}` of the keys matching the
/// glob, and of the master's own key files as `local`; `hash_type` defaults to the
/// master's.
fn finger(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let pattern = globs(inv.arg("match"))?;
    let hash = hash_type(inv)?;
    let store = inv.host.keys();
    let mut out = Vec::new();
    for (state, ids) in store.glob_match(&pattern)?.iter() {
        let mut fps: Vec<(Value, Value)> = Vec::new();
        for id in ids {
            if fps.iter().any(|(k, _)| k.as_str() == Some(id)) {
                continue;
            }
            if let Some(pem) = key_text(store, state, id)? {
                fps.push((s(id.as_str()), s(fingerprint(&pem, &hash)?)));
            }
        }
        out.push((s(state.dir_name()), Value::Map(fps)));
    }
    let patterns: Vec<&str> = pattern.split(',').collect();
    let mut local = Vec::new();
    for name in store.local_keys()? {
        if patterns == ["*"] || patterns.iter().any(|p| fnmatch(&name, p)) {
            if let Some(pem) = store.read_local(&name)? {
                let fp = fingerprint(&pem, &hash)?;
                local.push((s(name), s(fp)));
            }
        }
    }
    if !local.is_empty() {
        out.push((s("local"), Value::Map(local)));
    }
    Ok(Value::Map(out))
}

/// `key.finger_master`: `{"local": {"master.pub": fingerprint}}`, the fingerprint of
/// `pki_dir/master.pub` as minions compute `master_finger` (armour lines left out); `""`
/// when there is no such file.
fn finger_master(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let hash = hash_type(inv)?;
    let path = inv.host.opts().pki_dir.join("master.pub");
    let fp = if path.is_file() {
        let bytes = std::fs::read(&path).map_err(|e| os_error(&path, e))?;
        halite_proto::pem::pem_finger(&bytes, &hash).map_err(|_| no_hash(&hash))?
    } else {
        String::new()
    };
    Ok(map([("local", map([("master.pub", s(fp))]))]))
}

/// `key.master_key_str`: `{"local": {"<master id>.pub": key text}}` (the `id` option less
/// its `_master` suffix), in `clean_key` form; from the private key when the public file
/// is missing, as `MasterKeys.get_pub_str` does.
fn master_key_str(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let opts = inv.host.opts();
    let store = inv.host.keys();
    let master_id = opts.id.strip_suffix("_master").unwrap_or(&opts.id);
    let name = format!("{master_id}.pub");
    let pem = match store.read_local(&name)? {
        Some(pem) => pem,
        None => {
            let private = store
                .read_local(&format!("{master_id}.pem"))?
                .ok_or_else(|| {
                    WheelError::exception(
                        "FileNotFoundError",
                        format!(
                            "No such file or directory: '{}'",
                            opts.pki_dir.join(&name).display()
                        ),
                    )
                })?;
            PrivateKey::from_pem(private.as_bytes())
                .and_then(|k| k.public_key())
                .and_then(|p| p.to_pem())
                .map_err(crypto_error)?
        }
    };
    Ok(map([(
        "local",
        Value::Map(vec![(s(name), s(clean_key(&pem)))]),
    )]))
}

// ----- generation ------------------------------------------------------------------------

/// `key.gen`: a new pair, `{"priv", "pub"}`; nothing is stored.
fn gen(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let bits = keysize(inv.arg("keysize"), inv.host.opts().keysize)?;
    let (private, public) = generate(bits)?;
    Ok(map([("priv", s(private)), ("pub", s(public))]))
}

/// `key.gen_accept`: a new pair whose public key is stored as `id_`'s accepted key,
/// `{"priv", "pub"}`; `{}` and nothing generated when `id_` has a key (accepted, pending
/// or rejected) and `force` is false. `id_` is cleaned as Salt's `clean.id` does.
fn gen_accept(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let id = clean_id(inv.arg("id_"))?;
    let store = inv.host.keys();
    if !truthy(inv.arg("force")) && store.get(&id)?.is_some() {
        return Ok(Value::Map(Vec::new()));
    }
    let bits = keysize(inv.arg("keysize"), inv.host.opts().keysize)?;
    let (private, public) = generate(bits)?;
    store.put(&id, KeyState::Accepted, &public)?;
    inv.host.keys_changed();
    Ok(map([("priv", s(private)), ("pub", s(public))]))
}

/// `key.gen_keys` (`Key.gen_keys`): `<keyname>.pem`/`.pub` (default `minion`) in `keydir`
/// (default the pki directory), generated unless the private key is there already (mode
/// 0400; handed to `user` when given and known); answers the public key's SHA-256
/// fingerprint.
fn gen_keys(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let opts = inv.host.opts();
    let keydir = given_text(inv.arg("keydir"))?.map_or_else(|| opts.pki_dir.clone(), PathBuf::from);
    let keyname = given_text(inv.arg("keyname"))?.unwrap_or_else(|| "minion".to_owned());
    let bits = keysize(inv.arg("keysize"), opts.keysize)?;
    if !halite_proto::auth::valid_id(&keyname) {
        return Err(halite_keystore::Error::InvalidId(keyname).into());
    }
    let store = KeyStore::at(&keydir);
    let files = [
        keydir.join(format!("{keyname}.pem")),
        keydir.join(format!("{keyname}.pub")),
    ];
    let existed = files[0].exists();
    let key = store.find_or_create_pair(&keyname, bits)?;
    if !existed {
        if let Some(user) = given_text(inv.arg("user"))? {
            hand_over(&files, &user);
        }
    }
    let public = key
        .public_key()
        .and_then(|p| p.to_pem())
        .map_err(crypto_error)?;
    Ok(s(fingerprint(&public, "sha256")?))
}

/// Gives `files` to `user` (its uid), as the key cache does when it stores them; an
/// unknown user or a failure is passed over, as in Salt.
fn hand_over(files: &[PathBuf], user: &str) {
    let Some((uid, _)) = halite_config::user_ids(user) else {
        tracing::debug!("No user {user} to hand generated keys to");
        return;
    };
    for file in files {
        if let Err(e) = std::os::unix::fs::chown(file, Some(uid), None) {
            tracing::debug!("Could not hand {} to {user}: {e}", file.display());
        }
    }
}

/// `key.gen_signature` (`Key.gen_keys_signature`, `MasterKeys.gen_signature`), as
/// `halite-key --gen-signature` does it: signs the master public key (`pub`, else
/// `pki_dir/master.pub`) with the signing key (`priv`, else
/// `pki_dir/<master_sign_key_name>.pem`, created when missing with `auto_create`) and
/// writes the signature to `<signature_path or pki_dir>/<master_pubkey_signature>`.
/// Answers `True`, `False` (the file exists: kept), or Salt's message.
///
/// Deviations, as `halite-key`'s: the default signing key is the pair the master signs
/// with (Salt looks for `master_sign.pem` whatever `master_sign_key_name` says), and
/// `auto_create` never replaces an existing pair (Salt regenerates it).
fn gen_signature(inv: &Invocation<'_>) -> Result<Value, WheelError> {
    let opts = inv.host.opts();
    let pki = &opts.pki_dir;
    let public = match given_text(inv.arg("pub"))? {
        Some(p) if !Path::new(&p).is_file() => {
            return Ok(s(format!("Public-key {p} does not exist")));
        }
        Some(p) => Some(PathBuf::from(p)),
        None => Some(pki.join("master.pub")).filter(|p| p.is_file()),
    };
    let sign_name = &opts.master_sign_key_name;
    let private = match given_text(inv.arg("priv"))? {
        Some(p) if !Path::new(&p).is_file() => {
            return Ok(s(format!("Private-key {p} does not exist")));
        }
        Some(p) => Some(PathBuf::from(p)),
        None => Some(pki.join(format!("{sign_name}.pem"))).filter(|p| p.is_file()),
    };
    let sign_key = match private {
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|e| os_error(&path, e))?;
            PrivateKey::from_pem(&pem).map_err(crypto_error)?
        }
        None if truthy(inv.arg("auto_create")) => {
            let bits = keysize(inv.arg("keysize"), opts.keysize)?;
            inv.host.keys().find_or_create_pair(sign_name, bits)?
        }
        None => return Ok(s("No usable private-key found")),
    };
    let Some(public) = public else {
        return Ok(s("No usable public-key found"));
    };
    let pem = std::fs::read(&public).map_err(|e| os_error(&public, e))?;
    let master_pub = PublicKey::from_pem(&pem)
        .and_then(|k| k.to_pem())
        .map_err(crypto_error)?;
    let algo = SigAlgo::parse(opts.publish_signing_algorithm.as_str()).map_err(crypto_error)?;
    let signature = halite_proto::signing::signature_file_text(&sign_key, &master_pub, algo)
        .map_err(crypto_error)?;
    let name = &opts.master_pubkey_signature;
    let (target, shown) = match given_text(inv.arg("signature_path"))? {
        Some(dir) => (KeyStore::at(&dir), format!("{dir}/{name}")),
        None => (inv.host.keys().clone(), name.clone()),
    };
    if !target.write_pubkey_signature(name, &signature)? {
        tracing::error!("{shown} already exists at expected location");
        return Ok(Value::Boolean(false));
    }
    Ok(Value::Boolean(true))
}
