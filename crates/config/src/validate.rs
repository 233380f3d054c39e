//! Option type checks.
//!
//! Two layers:
//! * [`Reader`] extracts the options behind the typed structs, strictly: a wrong type or
//!   an out-of-range value is a [`ConfigError::InvalidValue`] naming the option, the file
//!   that set it and the expected type. It accepts what Salt's `_validate_opts` accepts
//!   (for instance a numeric string for an integer option) and adds range checks.
//! * [`salt_type_warnings`] replays `_validate_opts` over every other option against
//!   Salt's `VALID_OPTS` table and returns Salt's warning lines; Salt only logs these, so
//!   they do not fail the load.

use rmpv::Value;

use crate::options::{OptMap, Origins};
use crate::pyval::{py_float, py_int, py_int_from_str, py_str, py_type_name};
use crate::types::LogLevel;
use crate::valid_opts::VALID_OPTS;
use crate::ConfigError;

/// A Python type named in `VALID_OPTS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PyType {
    Str,
    Int,
    Bool,
    Float,
    List,
    Dict,
    Tuple,
    NoneType,
}

impl PyType {
    fn name(self) -> &'static str {
        match self {
            PyType::Str => "str",
            PyType::Int => "int",
            PyType::Bool => "bool",
            PyType::Float => "float",
            PyType::List => "list",
            PyType::Dict => "dict",
            PyType::Tuple => "tuple",
            PyType::NoneType => "NoneType",
        }
    }

    /// `isinstance(v, self)` (a bool is an int in Python).
    fn isinstance(self, v: &Value) -> bool {
        match self {
            PyType::Str => matches!(v, Value::String(_)),
            PyType::Int => matches!(v, Value::Integer(_) | Value::Boolean(_)),
            PyType::Bool => matches!(v, Value::Boolean(_)),
            PyType::Float => matches!(v, Value::F32(_) | Value::F64(_)),
            PyType::List => matches!(v, Value::Array(_)),
            PyType::Dict => matches!(v, Value::Map(_)),
            PyType::Tuple => false,
            PyType::NoneType => matches!(v, Value::Nil),
        }
    }

    /// `type(v) is self`.
    fn is_exact(self, v: &Value) -> bool {
        match self {
            PyType::Int => matches!(v, Value::Integer(_)),
            other => other.isinstance(v),
        }
    }

    /// Whether `self(v)` succeeds in Python.
    fn converts(self, v: &Value) -> bool {
        match self {
            PyType::Str | PyType::Bool => true,
            PyType::Int => py_int(v).is_some(),
            PyType::Float => py_float(v).is_some(),
            PyType::List | PyType::Tuple => matches!(
                v,
                Value::String(_) | Value::Binary(_) | Value::Array(_) | Value::Map(_)
            ),
            PyType::Dict => match v {
                Value::Map(_) => true,
                Value::String(s) => s.as_bytes().is_empty(),
                Value::Binary(b) => b.is_empty(),
                Value::Array(items) => items.iter().all(|item| match item {
                    Value::Array(pair) => pair.len() == 2,
                    Value::Map(pair) => pair.len() == 2,
                    Value::String(s) => s.as_str().is_some_and(|s| s.chars().count() == 2),
                    Value::Binary(b) => b.len() == 2,
                    _ => false,
                }),
                _ => false,
            },
            PyType::NoneType => false,
        }
    }

    /// `nf_types` in `_validate_opts`: types that convert but must still be refused.
    fn non_failing(self) -> &'static [PyType] {
        use PyType::*;
        match self {
            Str => &[List, Tuple, Dict],
            List | Tuple => &[Dict, Str],
            Bool => &[List, Tuple, Str, Int, Float, Dict, NoneType],
            Int => &[Bool, Float],
            Float => &[Bool],
            Dict | NoneType => &[],
        }
    }
}

/// A `VALID_OPTS` entry: one type, or a tuple of alternatives.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TypeSpec {
    One(PyType),
    Any(&'static [PyType]),
}

/// Salt's `VALID_OPTS` entry for `name`.
pub(crate) fn valid_type(name: &str) -> Option<TypeSpec> {
    VALID_OPTS
        .binary_search_by(|(key, _)| (*key).cmp(name))
        .ok()
        .and_then(|i| VALID_OPTS.get(i))
        .map(|(_, spec)| *spec)
}

/// Whether Salt's `_validate_opts` accepts `v` for `spec`.
fn salt_accepts(spec: TypeSpec, v: &Value) -> bool {
    if let Value::Boolean(_) = v {
        if matches!(spec, TypeSpec::One(PyType::Bool)) {
            return true;
        }
    } else {
        let instance = match spec {
            TypeSpec::One(t) => t.isinstance(v),
            TypeSpec::Any(types) => types.iter().any(|t| t.isinstance(v)),
        };
        if instance {
            return true;
        }
    }
    if let Value::String(s) = v {
        if s.as_bytes().starts_with(b"sdb://") {
            return true;
        }
    }
    match spec {
        TypeSpec::One(t) => t.converts(v) && !t.non_failing().iter().any(|nf| nf.isinstance(v)),
        TypeSpec::Any(types) => {
            if types.iter().any(|t| t.is_exact(v)) {
                return true;
            }
            use PyType::*;
            [Str, List, Tuple, Bool, Int, Float].iter().any(|&nf_type| {
                nf_type.converts(v)
                    && types.contains(&nf_type)
                    && !nf_type
                        .non_failing()
                        .iter()
                        .filter(|t| !types.contains(t))
                        .any(|t| t.isinstance(v))
            })
        }
    }
}

fn spec_names(spec: TypeSpec) -> String {
    match spec {
        TypeSpec::One(t) => t.name().to_owned(),
        TypeSpec::Any(types) => {
            let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
            match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                Some((last, _)) => format!(" or {last}"),
                None => String::new(),
            }
        }
    }
}

/// `_validate_opts`: Salt's warning for every option (except `skip`) whose value has a
/// type `VALID_OPTS` refuses.
pub(crate) fn salt_type_warnings(opts: &OptMap, skip: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in &opts.0 {
        let Some(name) = (match key {
            Value::String(s) => s.as_str(),
            _ => None,
        }) else {
            continue;
        };
        if skip.contains(&name) {
            continue;
        }
        let Some(spec) = valid_type(name) else {
            continue;
        };
        if !salt_accepts(spec, value) {
            out.push(format!(
                "Config option '{name}' with value {} has an invalid type of {}, a {} is required for this option",
                py_str(value),
                py_type_name(value),
                spec_names(spec)
            ));
        }
    }
    out
}

/// A short rendering of a value for error messages: `"abc"`, `-1`, `true`, `null`.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Nil => "null".to_owned(),
        Value::Boolean(b) => b.to_string(),
        Value::Integer(_) | Value::F32(_) | Value::F64(_) => py_str(v),
        Value::String(s) => format!("{:?}", String::from_utf8_lossy(s.as_bytes())),
        Value::Binary(_) => "binary data".to_owned(),
        Value::Array(_) => "a list".to_owned(),
        Value::Map(_) => "a mapping".to_owned(),
        Value::Ext(..) => "an extension value".to_owned(),
    }
}

/// Strict, typed access to options for the typed config structs.
pub(crate) struct Reader<'a> {
    pub opts: &'a OptMap,
    pub origins: &'a Origins,
}

const NIL: Value = Value::Nil;

impl Reader<'_> {
    fn value(&self, name: &str) -> &Value {
        self.opts.get(name).unwrap_or(&NIL)
    }

    pub fn invalid(&self, name: &str, expected: &str, got: &Value) -> ConfigError {
        ConfigError::InvalidValue {
            option: name.to_owned(),
            origin: self.origins.of(name),
            expected: expected.to_owned(),
            got: describe(got),
        }
    }

    /// An integer in `min..=max`; numeric strings are accepted as Salt's `int()` does,
    /// bools and floats are not.
    pub fn int_in(
        &self,
        name: &str,
        min: i128,
        max: i128,
        expected: &str,
    ) -> Result<i128, ConfigError> {
        let v = self.value(name);
        let n = match v {
            Value::Integer(_) => py_int(v),
            Value::String(s) => s.as_str().and_then(py_int_from_str),
            _ => None,
        };
        n.filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.invalid(name, expected, v))
    }

    pub fn port(&self, name: &str) -> Result<u16, ConfigError> {
        let n = self.int_in(name, 0, 65535, "an integer port (0-65535)")?;
        u16::try_from(n)
            .map_err(|_| self.invalid(name, "an integer port (0-65535)", self.value(name)))
    }

    /// Like [`Reader::port`], with `null` or absence meaning `None`.
    pub fn opt_port(&self, name: &str) -> Result<Option<u16>, ConfigError> {
        match self.value(name) {
            Value::Nil => Ok(None),
            _ => self.port(name).map(Some),
        }
    }

    pub fn u64(&self, name: &str, expected: &str) -> Result<u64, ConfigError> {
        let n = self.int_in(name, 0, i128::from(u64::MAX), expected)?;
        u64::try_from(n).map_err(|_| self.invalid(name, expected, self.value(name)))
    }

    pub fn u64_min(&self, name: &str, min: u64, expected: &str) -> Result<u64, ConfigError> {
        let n = self.int_in(name, i128::from(min), i128::from(u64::MAX), expected)?;
        u64::try_from(n).map_err(|_| self.invalid(name, expected, self.value(name)))
    }

    pub fn u32_min(&self, name: &str, min: u32, expected: &str) -> Result<u32, ConfigError> {
        let n = self.int_in(name, i128::from(min), i128::from(u32::MAX), expected)?;
        u32::try_from(n).map_err(|_| self.invalid(name, expected, self.value(name)))
    }

    /// A finite, non-negative number of seconds (int, float or numeric string).
    pub fn seconds(&self, name: &str) -> Result<f64, ConfigError> {
        let v = self.value(name);
        let f = match v {
            Value::Boolean(_) => None,
            _ => py_float(v),
        };
        f.filter(|f| f.is_finite() && *f >= 0.0)
            .ok_or_else(|| self.invalid(name, "a non-negative number of seconds", v))
    }

    /// Only `true`/`false` (Salt refuses strings and numbers for bool options).
    pub fn boolean(&self, name: &str) -> Result<bool, ConfigError> {
        match self.value(name) {
            Value::Boolean(b) => Ok(*b),
            other => Err(self.invalid(name, "a boolean (true or false)", other)),
        }
    }

    /// A boolean, with `null` meaning unset.
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ConfigError> {
        match self.value(name) {
            Value::Nil => Ok(None),
            Value::Boolean(b) => Ok(Some(*b)),
            other => Err(self.invalid(name, "a boolean (true or false) or null", other)),
        }
    }

    /// A string; numbers and bools become their Python `str()` as Salt's `str()` check
    /// allows. `null` is refused.
    pub fn string(&self, name: &str) -> Result<String, ConfigError> {
        self.opt_string(name)?
            .ok_or_else(|| self.invalid(name, "a string", &NIL))
    }

    /// Like [`Reader::string`], with `null` or absence meaning `None`.
    pub fn opt_string(&self, name: &str) -> Result<Option<String>, ConfigError> {
        match self.value(name) {
            Value::Nil => Ok(None),
            Value::String(s) => s
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or_else(|| self.invalid(name, "a UTF-8 string", self.value(name))),
            v @ (Value::Boolean(_) | Value::Integer(_) | Value::F32(_) | Value::F64(_)) => {
                Ok(Some(py_str(v)))
            }
            other => Err(self.invalid(name, "a string", other)),
        }
    }

    /// One of `choices` (compared exactly).
    pub fn choice<T: Copy>(&self, name: &str, choices: &[(&str, T)]) -> Result<T, ConfigError> {
        let v = self.value(name);
        let text = match v {
            Value::String(s) => s.as_str(),
            _ => None,
        };
        choices
            .iter()
            .find(|(label, _)| Some(*label) == text)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                let labels: Vec<&str> = choices.iter().map(|(label, _)| *label).collect();
                self.invalid(name, &format!("one of {}", labels.join(", ")), v)
            })
    }

    /// A Salt log level name, case-insensitively.
    pub fn log_level(&self, name: &str) -> Result<LogLevel, ConfigError> {
        let text = self.string(name)?;
        LogLevel::parse(&text).ok_or_else(|| {
            let names: Vec<&str> = LogLevel::CHOICES.iter().map(|(n, _)| *n).collect();
            self.invalid(
                name,
                &format!("one of {}", names.join(", ")),
                self.value(name),
            )
        })
    }

    /// A mapping; `null` (an option left empty) is an empty mapping.
    pub fn map(&self, name: &str) -> Result<Value, ConfigError> {
        match self.value(name) {
            Value::Nil => Ok(Value::Map(Vec::new())),
            v @ Value::Map(_) => Ok(v.clone()),
            other => Err(self.invalid(name, "a mapping", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml;

    fn accepts(option: &str, yaml_value: &str) -> bool {
        let v = yaml::load(yaml_value).unwrap();
        salt_accepts(valid_type(option).unwrap(), &v)
    }

    /// Expectations from Salt 3008.3's `_validate_opts` (a warning means "refused").
    #[test]
    fn salt_type_check_matches_validate_opts() {
        let cases = [
            ("publish_port", "4505", true),
            ("publish_port", "'4505'", true),
            ("publish_port", "abc", false),
            ("publish_port", "4505.0", false),
            ("publish_port", "true", false),
            ("auto_accept", "maybe", false),
            ("auto_accept", "'yes'", false),
            ("auto_accept", "yes", true),
            ("auto_accept", "1", false),
            ("user", "0", true),
            ("user", "[a]", false),
            ("user", "~", true),
            ("nodegroups", "[a]", true),
            ("nodegroups", "foo", false),
            ("master", "[a, b]", true),
            ("master", "~", true),
            ("master_port", "'4506'", true),
            ("ipv6", "~", true),
            ("ipv6", "1", false),
            ("acceptance_wait_time", "10", true),
            ("acceptance_wait_time", "'2.5'", true),
            ("acceptance_wait_time", "false", false),
            ("file_roots", "{}", true),
            ("file_roots", "[[a, b]]", true),
            ("file_roots", "x", false),
            ("peer", "sdb://vault/peer", true),
            ("log_level_logfile", "~", true),
            ("cluster_id", "~", true),
        ];
        for (option, value, want) in cases {
            assert_eq!(accepts(option, value), want, "{option}: {value}");
        }
    }

    #[test]
    fn warnings_use_salts_wording() {
        let opts = OptMap(vec![
            (Value::from("auto_accept"), Value::from("maybe")),
            (Value::from("ipv6"), Value::from(1)),
            (Value::from("not_an_option"), Value::from(1)),
        ]);
        assert_eq!(
            salt_type_warnings(&opts, &[]),
            vec![
                "Config option 'auto_accept' with value maybe has an invalid type of str, a bool is required for this option",
                "Config option 'ipv6' with value 1 has an invalid type of int, a NoneType or bool is required for this option",
            ]
        );
    }
}
