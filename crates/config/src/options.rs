//! Salt's `opts` dict as an ordered `rmpv` map, and where each option came from.

use std::fmt;
use std::path::{Path, PathBuf};

use rmpv::Value;

use crate::pyval::{py_eq, py_str};

/// Where an option's value was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A configuration file (the main file or an included one).
    File(PathBuf),
    /// Salt's built-in default (or a value derived from other options).
    Defaults,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Defaults => f.write_str("the built-in defaults"),
        }
    }
}

/// True if `key` is the string `name`.
pub(crate) fn key_is(key: &Value, name: &str) -> bool {
    matches!(key, Value::String(s) if s.as_bytes() == name.as_bytes())
}

/// An ordered map with Python dict semantics (keys compared with Python `==`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OptMap(pub Vec<(Value, Value)>);

impl OptMap {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| key_is(k, name)).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.0
            .iter_mut()
            .find(|(k, _)| key_is(k, name))
            .map(|(_, v)| v)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// `opts[name] = value`: replaces in place, or appends a new key.
    pub fn set(&mut self, name: &str, value: Value) {
        self.set_value(Value::from(name), value);
    }

    pub fn set_value(&mut self, key: Value, value: Value) {
        match self.0.iter_mut().find(|(k, _)| py_eq(k, &key)) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// `dict.update`: a shallow merge where `other` wins.
    pub fn update(&mut self, other: OptMap) {
        for (k, v) in other.0 {
            self.set_value(k, v);
        }
    }

    /// The option's string value, if it is a string.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(Value::String(s)) => s.as_str(),
            _ => None,
        }
    }

    /// Python truthiness of the option (absent is false).
    pub fn truthy(&self, name: &str) -> bool {
        self.get(name).is_some_and(truthy)
    }
}

/// Python's `bool(v)`.
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Nil => false,
        Value::Boolean(b) => *b,
        Value::Integer(i) => i.as_i64().is_none_or(|n| n != 0),
        Value::F32(f) => *f != 0.0,
        Value::F64(f) => *f != 0.0,
        Value::String(s) => !s.as_bytes().is_empty(),
        Value::Binary(b) => !b.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Map(m) => !m.is_empty(),
        Value::Ext(..) => true,
    }
}

/// The file that last set each top-level option.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins(Vec<(String, PathBuf)>);

impl Origins {
    /// Records `path` as the origin of every key of `opts` (non-string keys by `str()`).
    pub fn record(&mut self, opts: &OptMap, path: &Path) {
        for (key, _) in &opts.0 {
            self.set(&py_str(key), path);
        }
    }

    pub fn set(&mut self, name: &str, path: &Path) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = path.to_path_buf(),
            None => self.0.push((name.to_owned(), path.to_path_buf())),
        }
    }

    /// Takes over `other`'s entries, which win.
    pub fn extend(&mut self, other: Origins) {
        for (name, path) in other.0 {
            self.set(&name, &path);
        }
    }

    pub fn of(&self, name: &str) -> Origin {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or(Origin::Defaults, |(_, p)| Origin::File(p.clone()))
    }

    /// The option names set by files, in the order first seen.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}
