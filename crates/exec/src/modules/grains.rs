//! `salt/modules/grains.py`: reading grains. Halite does not write grains
//! (`grains.set*`, `append`, `remove`, `delkey`, `delval` are not offered).

use rmpv::Value;

use crate::error::ExecError;
use crate::pyval::{is_true, py_eq, py_str, text};
use crate::registry::{Export, Invocation};

pub(crate) const EXPORTS: &[Export] = &[
    ("grains.equals", equals, None),
    ("grains.fetch", get, None),
    ("grains.filter_by", filter_by, None),
    ("grains.get", get, None),
    ("grains.has_value", has_value, None),
    ("grains.item", item, Some("nested")),
    ("grains.items", items, Some("nested")),
    ("grains.ls", ls, None),
];

/// `traverse_dict_and_list(data, key, default, delimiter)` for any key value.
fn traverse<'v>(data: &'v Value, key: &Value, delimiter: &Value) -> Option<&'v Value> {
    halite_target::traverse_dict_and_list(data, &py_str(key), &py_str(delimiter))
}

/// `_SANITIZERS`: what `sanitize=True` hides.
fn sanitize(key: &str, value: &Value) -> Option<Value> {
    let fixed = match key {
        "domain" => "DOMAINNAME",
        "fqdn" | "id" => "MINION.DOMAINNAME",
        "host" | "localhost" | "nodename" => "MINION",
        "serialnumber" => {
            let chars: Vec<char> = py_str(value).chars().collect();
            let keep = chars.len() * 3 / 4;
            let masked: String = chars[..keep]
                .iter()
                .copied()
                .chain(std::iter::repeat_n('X', chars.len() - keep))
                .collect();
            return Some(Value::from(masked));
        }
        _ => return None,
    };
    Some(Value::from(fixed))
}

fn sanitized(entries: &[(Value, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(k, v)| {
                let clean = text(k).and_then(|name| sanitize(&name, v));
                (k.clone(), clean.unwrap_or_else(|| v.clone()))
            })
            .collect(),
    )
}

fn items(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let grains = inv.ctx.grains.as_ref();
    if !is_true(inv.arg("sanitize")) {
        return Ok(grains.clone());
    }
    match grains {
        Value::Map(entries) => Ok(sanitized(entries)),
        other => Ok(other.clone()),
    }
}

fn item(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let default = inv
        .call
        .kwarg("default")
        .cloned()
        .unwrap_or_else(|| Value::from(""));
    let delimiter = inv
        .call
        .kwarg("delimiter")
        .cloned()
        .unwrap_or_else(|| Value::from(":"));
    let mut ret: Vec<(Value, Value)> = Vec::new();
    for key in &inv.call.varargs {
        let value = traverse(&inv.ctx.grains, key, &delimiter)
            .cloned()
            .unwrap_or_else(|| default.clone());
        crate::args::dict_set(&mut ret, key.clone(), value);
    }
    if inv.call.kwarg("sanitize").is_some_and(is_true) {
        return Ok(sanitized(&ret));
    }
    Ok(Value::Map(ret))
}

fn get(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(
        traverse(&inv.ctx.grains, inv.arg("key"), inv.arg("delimiter"))
            .cloned()
            .unwrap_or_else(|| inv.arg("default").clone()),
    )
}

fn has_value(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::Boolean(
        traverse(&inv.ctx.grains, inv.arg("key"), &Value::from(":")).is_some(),
    ))
}

fn ls(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let mut keys: Vec<String> = match inv.ctx.grains.as_ref() {
        Value::Map(entries) => entries.iter().map(|(k, _)| py_str(k)).collect(),
        _ => Vec::new(),
    };
    keys.sort();
    Ok(Value::Array(keys.into_iter().map(Value::from).collect()))
}

fn equals(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let current = traverse(&inv.ctx.grains, inv.arg("key"), &Value::from(":"))
        .cloned()
        .unwrap_or_else(|| Value::from(""));
    Ok(Value::Boolean(py_str(inv.arg("value")) == py_str(&current)))
}

fn filter_by(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    filter_by_data(
        inv.arg("lookup_dict"),
        inv.arg("grain"),
        &inv.ctx.grains,
        inv.arg("merge"),
        inv.arg("default"),
        inv.arg("base"),
    )
}

fn map_get<'v>(entries: &'v [(Value, Value)], key: &Value) -> Option<&'v Value> {
    entries.iter().find(|(k, _)| py_eq(k, key)).map(|(_, v)| v)
}

/// `salt.utils.data.filter_by`.
pub(crate) fn filter_by_data(
    lookup_dict: &Value,
    lookup: &Value,
    traverse_data: &Value,
    merge: &Value,
    default: &Value,
    base: &Value,
) -> Result<Value, ExecError> {
    let Value::Map(lookup_entries) = lookup_dict else {
        return Err(ExecError::exception(
            "AttributeError",
            format!(
                "'{}' object has no attribute 'get'",
                crate::pyval::py_type_name(lookup_dict)
            ),
        ));
    };
    let val = traverse(traverse_data, lookup, &Value::from(":"))
        .cloned()
        .unwrap_or(Value::Array(Vec::new()));
    let candidates = match val {
        Value::Array(items) => items,
        other => vec![other],
    };
    let mut ret: Option<Value> = None;
    'outer: for each in &candidates {
        let test_each = py_str(each);
        for (key, value) in lookup_entries {
            if halite_target::fnmatch::fnmatch(&test_each, &py_str(key)) {
                if *value != Value::Nil {
                    ret = Some(value.clone());
                    break 'outer;
                }
                break;
            }
        }
    }
    if ret.is_none() {
        ret = map_get(lookup_entries, default)
            .filter(|v| **v != Value::Nil)
            .cloned();
    }
    if crate::pyval::truthy(base) {
        if let Some(base_values) = map_get(lookup_entries, base) {
            ret = match ret {
                None => Some(base_values.clone()).filter(|v| *v != Value::Nil),
                Some(current) if matches!(base_values, Value::Map(_)) => {
                    if !matches!(current, Value::Map(_)) {
                        return Err(ExecError::exception(
                            "salt.exceptions.SaltException",
                            "filter_by default and look-up values must both be dictionaries.",
                        ));
                    }
                    let mut merged = base_values.clone();
                    dict_update(&mut merged, &current)?;
                    Some(merged)
                }
                Some(current) => Some(current),
            };
        }
    }
    if crate::pyval::truthy(merge) {
        if !matches!(merge, Value::Map(_)) {
            return Err(ExecError::exception(
                "salt.exceptions.SaltException",
                "filter_by merge argument must be a dictionary.",
            ));
        }
        ret = match ret {
            None => Some(merge.clone()),
            Some(mut current) => {
                dict_update(&mut current, merge)?;
                Some(current)
            }
        };
    }
    Ok(ret.unwrap_or(Value::Nil))
}

/// `salt.utils.dictupdate.update(dest, upd)`: nested mappings merge, anything else is
/// replaced.
pub(crate) fn dict_update(dest: &mut Value, upd: &Value) -> Result<(), ExecError> {
    let (Value::Map(dest_entries), Value::Map(upd_entries)) = (&mut *dest, upd) else {
        return Err(ExecError::TypeError(
            "Cannot update using non-dict types in dictupdate.update()".to_owned(),
        ));
    };
    for (key, val) in upd_entries {
        match dest_entries.iter_mut().find(|(k, _)| py_eq(k, key)) {
            Some((_, existing))
                if matches!(existing, Value::Map(_)) && matches!(val, Value::Map(_)) =>
            {
                dict_update(existing, val)?;
            }
            Some((_, existing)) => *existing = val.clone(),
            None => dest_entries.push((key.clone(), val.clone())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        halite_config::yaml::load(text).expect("test YAML parses")
    }

    #[test]
    fn filter_by_matches_the_salt_docstring_examples() {
        let grains = yaml("os_family: Debian\nid: salt-minion\nroles: [web, db]");
        let nil = Value::Nil;
        let dflt = Value::from("default");
        let cases = [
            (
                "{Debian: Debheads rule, RedHat: I love my hat}",
                "os_family",
                "~",
                "~",
                "Debheads rule",
            ),
            (
                "{salt*: got some salt, default: salt is not here}",
                "id",
                "~",
                "~",
                "got some salt",
            ),
            (
                "{A: B, C: {D: {E: F, G: H}}}",
                "xxx",
                "{D: {E: I}, J: K}",
                "C",
                "{D: {E: I, G: H}, J: K}",
            ),
            (
                "{default: {A: {B: C}, D: E}, F: {A: {B: G}}, H: {D: I}}",
                "xxx",
                "{D: J}",
                "F",
                "{A: {B: G}, D: J}",
            ),
            (
                "{db: database, web: webserver}",
                "roles",
                "~",
                "~",
                "webserver",
            ),
            ("{nothing: here}", "os_family", "~", "~", "~"),
        ];
        for (lookup, grain, merge, default, want) in cases {
            let default = if default == "~" {
                dflt.clone()
            } else {
                Value::from(default)
            };
            let got = filter_by_data(
                &yaml(lookup),
                &Value::from(grain),
                &grains,
                &yaml(merge),
                &default,
                &nil,
            )
            .expect("filter_by works");
            assert_eq!(got, yaml(want), "{lookup}");
        }
    }

    #[test]
    fn filter_by_rejects_a_non_dict_merge() {
        let err = filter_by_data(
            &yaml("{a: {b: c}}"),
            &Value::from("x"),
            &yaml("{}"),
            &Value::from("str"),
            &Value::from("a"),
            &Value::Nil,
        )
        .expect_err("merge must be a dict");
        assert_eq!(
            err.to_string(),
            "salt.exceptions.SaltException: filter_by merge argument must be a dictionary."
        );
    }

    #[test]
    fn serial_numbers_are_masked_from_three_quarters() {
        assert_eq!(
            sanitize("serialnumber", &Value::from("ABCDEFGH")),
            Some(Value::from("ABCDEFXX"))
        );
        assert_eq!(
            sanitize("fqdn", &Value::from("a.b")),
            Some(Value::from("MINION.DOMAINNAME"))
        );
        assert_eq!(sanitize("os", &Value::from("Debian")), None);
    }
}
