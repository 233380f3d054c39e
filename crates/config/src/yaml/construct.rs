//! Node graph to `rmpv::Value`, following PyYAML's `SafeConstructor` as overridden by
//! Salt's `SaltYamlSafeLoader` (`salt/utils/yamlloader.py`):
//!
//! * an int written with leading zeros loses them before conversion, so `0755` is 755
//!   (decimal) while `-0755` stays octal (-493), exactly as Salt 3008.3 loads it;
//! * `!!timestamp` values stay strings; `!!binary` becomes `Value::Binary`;
//! * duplicate keys (by Python equality, so `1`, `1.0` and `true` collide) are an error;
//! * `<<` merge keys are flattened as Salt's `flatten_mapping` does;
//! * `!!omap`/`!!pairs` become lists of `[key, value]` pairs and `!!set` a list of keys.
//!
//! Deviations, all on inputs Salt cannot load sensibly either: integers outside
//! `i64`/`u64`, aliases that refer to an enclosing node (Python builds a cyclic object),
//! nesting deeper than [`MAX_DEPTH`] and alias expansion beyond [`MAX_VALUES`] values are
//! errors instead of Python objects or crashes.

use rmpv::Value;

use super::compose::{Document, Node, NodeId, NodeKind};
use super::resolve::{
    bool_value, BOOL_TAG, FLOAT_TAG, INT_TAG, MAP_TAG, MERGE_TAG, NULL_TAG, SEQ_TAG, STR_TAG,
    VALUE_TAG,
};
use super::YamlError;
use crate::pyval::{py_eq, py_str};

const BINARY_TAG: &str = "tag:yaml.org,2002:binary";
const TIMESTAMP_TAG: &str = "tag:yaml.org,2002:timestamp";
const OMAP_TAG: &str = "tag:yaml.org,2002:omap";
const PAIRS_TAG: &str = "tag:yaml.org,2002:pairs";
const SET_TAG: &str = "tag:yaml.org,2002:set";
const PY_UNICODE_TAG: &str = "tag:yaml.org,2002:python/unicode";

/// Deepest nesting of collections (and of merge keys) accepted.
pub(crate) const MAX_DEPTH: usize = 512;
/// Most values one document may construct, counting every copy made for an alias; this
/// stops "billion laughs" documents.
pub(crate) const MAX_VALUES: usize = 1_000_000;

/// Constructs the document's root value.
pub(crate) fn construct(doc: &Document) -> Result<Value, YamlError> {
    let mut anchored = vec![false; doc.nodes.len()];
    let mut seen = vec![false; doc.nodes.len()];
    // A node reached twice is an alias target: cache its value instead of rebuilding it.
    for node in &doc.nodes {
        let children: Vec<NodeId> = match &node.kind {
            NodeKind::Scalar(_) => Vec::new(),
            NodeKind::Sequence(items) => items.clone(),
            NodeKind::Mapping(pairs) => pairs.iter().flat_map(|&(k, v)| [k, v]).collect(),
        };
        for child in children {
            if let Some(flag) = seen.get_mut(child) {
                if *flag {
                    if let Some(shared) = anchored.get_mut(child) {
                        *shared = true;
                    }
                }
                *flag = true;
            }
        }
    }
    let mut builder = Builder {
        doc,
        cache: vec![None; doc.nodes.len()],
        anchored,
        in_progress: vec![false; doc.nodes.len()],
        built: 0,
    };
    builder.value(doc.root, 0)
}

struct Builder<'d> {
    doc: &'d Document,
    /// Values of shared nodes with the number of values each holds.
    cache: Vec<Option<(Value, usize)>>,
    anchored: Vec<bool>,
    in_progress: Vec<bool>,
    built: usize,
}

impl<'d> Builder<'d> {
    fn node(&self, id: NodeId) -> Result<&'d Node, YamlError> {
        self.doc
            .nodes
            .get(id)
            .ok_or_else(|| YamlError::internal("dangling node reference"))
    }

    fn count(&mut self, n: usize, node: &Node) -> Result<(), YamlError> {
        self.built = self.built.saturating_add(n);
        if self.built > MAX_VALUES {
            return Err(YamlError::at(
                node.mark,
                format!("document expands to more than {MAX_VALUES} values (alias bomb?)"),
            ));
        }
        Ok(())
    }

    fn value(&mut self, id: NodeId, depth: usize) -> Result<Value, YamlError> {
        let node = self.node(id)?;
        if let Some(Some((value, size))) = self.cache.get(id) {
            let (value, size) = (value.clone(), *size);
            self.count(size, node)?;
            return Ok(value);
        }
        if depth > MAX_DEPTH {
            return Err(YamlError::at(
                node.mark,
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        if self.in_progress.get(id).copied().unwrap_or(false) {
            return Err(YamlError::at(
                node.mark,
                "an alias refers to a collection that contains it (recursive structure)",
            ));
        }
        if let Some(flag) = self.in_progress.get_mut(id) {
            *flag = true;
        }
        let before = self.built;
        let result = self.build(node, depth);
        if let Some(flag) = self.in_progress.get_mut(id) {
            *flag = false;
        }
        let value = result?;
        self.count(1, node)?;
        if self.anchored.get(id).copied().unwrap_or(false) {
            if let Some(slot) = self.cache.get_mut(id) {
                *slot = Some((value.clone(), self.built - before));
            }
        }
        Ok(value)
    }

    fn build(&mut self, node: &'d Node, depth: usize) -> Result<Value, YamlError> {
        match node.tag.as_str() {
            NULL_TAG => scalar(node).map(|_| Value::Nil),
            BOOL_TAG => {
                let text = scalar(node)?;
                bool_value(&text.to_lowercase())
                    .or_else(|| bool_value(text))
                    .map(Value::Boolean)
                    .ok_or_else(|| {
                        YamlError::at(node.mark, format!("invalid boolean value {text:?}"))
                    })
            }
            INT_TAG => {
                construct_int(scalar(node)?).map_err(|message| YamlError::at(node.mark, message))
            }
            FLOAT_TAG => {
                let text = scalar(node)?;
                construct_float(text).map(Value::F64).ok_or_else(|| {
                    YamlError::at(node.mark, format!("invalid float value {text:?}"))
                })
            }
            STR_TAG | TIMESTAMP_TAG | PY_UNICODE_TAG => {
                scalar(node).map(|text| Value::String(text.into()))
            }
            BINARY_TAG => decode_binary(scalar(node)?)
                .map(Value::Binary)
                .map_err(|message| YamlError::at(node.mark, message)),
            SEQ_TAG => {
                let NodeKind::Sequence(items) = &node.kind else {
                    return Err(expected(node, "a sequence"));
                };
                let mut out = Vec::with_capacity(items.len());
                for &item in items {
                    out.push(self.value(item, depth + 1)?);
                }
                Ok(Value::Array(out))
            }
            MAP_TAG => self.mapping(node, depth).map(Value::Map),
            SET_TAG => Ok(Value::Array(
                self.mapping(node, depth)?
                    .into_iter()
                    .map(|(key, _)| key)
                    .collect(),
            )),
            OMAP_TAG | PAIRS_TAG => {
                let NodeKind::Sequence(items) = &node.kind else {
                    return Err(expected(node, "a sequence"));
                };
                let mut out = Vec::with_capacity(items.len());
                for &item in items {
                    let item_node = self.node(item)?;
                    let NodeKind::Mapping(pairs) = &item_node.kind else {
                        return Err(expected(item_node, "a mapping of length 1"));
                    };
                    let [(k, v)] = pairs.as_slice() else {
                        return Err(YamlError::at(
                            item_node.mark,
                            format!(
                                "expected a single mapping item, but found {} items",
                                pairs.len()
                            ),
                        ));
                    };
                    let key = self.value(*k, depth + 1)?;
                    let value = self.value(*v, depth + 1)?;
                    out.push(Value::Array(vec![key, value]));
                }
                Ok(Value::Array(out))
            }
            other => Err(YamlError::at(
                node.mark,
                format!("could not determine a constructor for the tag '{other}'"),
            )),
        }
    }

    fn mapping(&mut self, node: &'d Node, depth: usize) -> Result<Vec<(Value, Value)>, YamlError> {
        let pairs = self.flatten(node, depth)?;
        let mut out: Vec<(Value, Value)> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let key_node = self.node(k)?;
            let key = match (&key_node.kind, key_node.tag.as_str()) {
                // `=` as a key is the string "=" (Salt's flatten_mapping).
                (NodeKind::Scalar(text), VALUE_TAG) => Value::String(text.as_str().into()),
                _ => self.value(k, depth + 1)?,
            };
            if matches!(key, Value::Array(_) | Value::Map(_)) {
                return Err(YamlError::at(key_node.mark, "found unacceptable key"));
            }
            let value = self.value(v, depth + 1)?;
            if out.iter().any(|(existing, _)| py_eq(existing, &key)) {
                return Err(YamlError::at(
                    key_node.mark,
                    format!("found conflicting ID '{}'", py_str(&key)),
                ));
            }
            out.push((key, value));
        }
        Ok(out)
    }

    /// Salt's `flatten_mapping`: the pairs of `node` with `<<` merges spliced in front,
    /// minus merged keys that the mapping sets itself (compared by their source text).
    fn flatten(&self, node: &Node, depth: usize) -> Result<Vec<(NodeId, NodeId)>, YamlError> {
        if depth > MAX_DEPTH {
            return Err(YamlError::at(
                node.mark,
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        let NodeKind::Mapping(pairs) = &node.kind else {
            return Err(expected(node, "a mapping"));
        };
        let mut merge: Vec<(NodeId, NodeId)> = Vec::new();
        let mut own: Vec<(NodeId, NodeId)> = Vec::new();
        for &(k, v) in pairs {
            if self.node(k)?.tag != MERGE_TAG {
                own.push((k, v));
                continue;
            }
            let value_node = self.node(v)?;
            match &value_node.kind {
                NodeKind::Mapping(_) => merge.extend(self.flatten(value_node, depth + 1)?),
                NodeKind::Sequence(items) => {
                    let mut submerge = Vec::with_capacity(items.len());
                    for &item in items {
                        let item_node = self.node(item)?;
                        if !matches!(item_node.kind, NodeKind::Mapping(_)) {
                            return Err(YamlError::at(
                                item_node.mark,
                                format!(
                                    "expected a mapping for merging, but found {}",
                                    kind_name(item_node)
                                ),
                            ));
                        }
                        submerge.push(self.flatten(item_node, depth + 1)?);
                    }
                    for pairs in submerge.into_iter().rev() {
                        merge.extend(pairs);
                    }
                }
                NodeKind::Scalar(_) => {
                    return Err(YamlError::at(
                        value_node.mark,
                        "expected a mapping or list of mappings for merging, but found scalar",
                    ))
                }
            }
        }
        if merge.is_empty() {
            return Ok(own);
        }
        let mut existing = Vec::with_capacity(own.len());
        for &(k, _) in &own {
            if let NodeKind::Scalar(text) = &self.node(k)?.kind {
                existing.push(text.as_str());
            }
        }
        let mut out = Vec::with_capacity(merge.len() + own.len());
        for (k, v) in merge {
            let shadowed = match &self.node(k)?.kind {
                NodeKind::Scalar(text) => existing.contains(&text.as_str()),
                _ => false,
            };
            if !shadowed {
                out.push((k, v));
            }
        }
        out.extend(own);
        Ok(out)
    }
}

fn kind_name(node: &Node) -> &'static str {
    match node.kind {
        NodeKind::Scalar(_) => "scalar",
        NodeKind::Sequence(_) => "sequence",
        NodeKind::Mapping(_) => "mapping",
    }
}

fn expected(node: &Node, what: &str) -> YamlError {
    YamlError::at(
        node.mark,
        format!("expected {what} node, but found {}", kind_name(node)),
    )
}

fn scalar(node: &Node) -> Result<&str, YamlError> {
    match &node.kind {
        NodeKind::Scalar(text) => Ok(text),
        _ => Err(expected(node, "a scalar")),
    }
}

fn int_value(n: i128) -> Result<Value, String> {
    if let Ok(n) = u64::try_from(n) {
        Ok(Value::from(n))
    } else if let Ok(n) = i64::try_from(n) {
        Ok(Value::from(n))
    } else {
        Err(format!("integer {n} does not fit in 64 bits"))
    }
}

fn parse_radix(digits: &str, radix: u32, original: &str) -> Result<i128, String> {
    let digits = digits.trim();
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return Err(format!("invalid integer value {original:?}"));
    }
    i128::from_str_radix(digits, radix).map_err(|err| match err.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
            format!("integer {original:?} does not fit in 64 bits")
        }
        _ => format!("invalid integer value {original:?}"),
    })
}

/// Salt's `construct_scalar` leading-zero strip, then PyYAML's `construct_yaml_int`.
pub(crate) fn construct_int(text: &str) -> Result<Value, String> {
    let mut raw = text;
    if raw != "0" && raw.starts_with('0') && !raw.starts_with("0b") && !raw.starts_with("0x") {
        raw = raw.trim_start_matches('0');
        if raw.is_empty() {
            raw = "0";
        }
    }
    let cleaned = raw.replace('_', "");
    let (sign, body) = match cleaned.as_bytes().first() {
        Some(b'-') => (-1i128, &cleaned[1..]),
        Some(b'+') => (1, &cleaned[1..]),
        _ => (1, cleaned.as_str()),
    };
    let magnitude = if body == "0" {
        0
    } else if let Some(bin) = body.strip_prefix("0b") {
        parse_radix(bin, 2, text)?
    } else if let Some(hex) = body.strip_prefix("0x") {
        parse_radix(hex, 16, text)?
    } else if body.starts_with('0') {
        parse_radix(body, 8, text)?
    } else if body.contains(':') {
        let mut total: i128 = 0;
        for part in body.split(':') {
            let digit = parse_radix(part, 10, text)?;
            total = total
                .checked_mul(60)
                .and_then(|t| t.checked_add(digit))
                .ok_or_else(|| format!("integer {text:?} does not fit in 64 bits"))?;
        }
        total
    } else {
        parse_radix(body, 10, text)?
    };
    int_value(sign * magnitude)
}

/// PyYAML's `construct_yaml_float`.
pub(crate) fn construct_float(text: &str) -> Option<f64> {
    let cleaned = text.replace('_', "").to_lowercase();
    let (sign, body) = match cleaned.as_bytes().first() {
        Some(b'-') => (-1.0, &cleaned[1..]),
        Some(b'+') => (1.0, &cleaned[1..]),
        _ => (1.0, cleaned.as_str()),
    };
    if body == ".inf" {
        Some(sign * f64::INFINITY)
    } else if body == ".nan" {
        Some(f64::NAN)
    } else if body.contains(':') {
        let mut total = 0.0;
        for part in body.split(':') {
            total = total * 60.0 + part.trim().parse::<f64>().ok()?;
        }
        Some(sign * total)
    } else {
        body.trim().parse::<f64>().ok().map(|f| sign * f)
    }
}

/// Salt's `construct_yaml_binary`: ASCII only, padded, then decoded like Python's lenient
/// `base64.decodebytes` (characters outside the alphabet are skipped).
fn decode_binary(text: &str) -> Result<Vec<u8>, String> {
    if !text.is_ascii() {
        return Err("failed to convert base64 data into ascii".to_owned());
    }
    let mut sextets = Vec::with_capacity(text.len());
    for b in text.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => continue,
        };
        sextets.push(v);
    }
    if sextets.len() % 4 == 1 {
        return Err("failed to decode base64 data: invalid number of data characters".to_owned());
    }
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for chunk in sextets.chunks(4) {
        let mut acc: u32 = 0;
        for (i, &s) in chunk.iter().enumerate() {
            acc |= u32::from(s) << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_decodes_lenient_base64() {
        assert_eq!(decode_binary("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_binary("aGVs\n bG8").unwrap(), b"hello");
        assert!(decode_binary("a").is_err());
        assert!(decode_binary("é").is_err());
    }
}
