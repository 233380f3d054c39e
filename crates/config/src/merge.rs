//! Reading configuration files and merging includes, after Salt's `load_config`,
//! `include_config`, `_read_conf_file` and `salt.utils.dictupdate.update`.
//!
//! Merge rules (Salt 3008.3):
//! * files matched by one include pattern are read in sorted order and merged into each
//!   other *recursively*: nested mappings merge key by key and lists are concatenated
//!   (items already present are not repeated);
//! * the result of `default_include` (`master.d/*.conf`), then of `include`, replaces the
//!   main file's top-level options wholesale (a plain `dict.update`);
//! * a file that sets `include` pulls those files in first, relative to itself.
//!
//! Deviation: Salt's master logs a broken included file and ignores it; here any file
//! that cannot be read or parsed fails the load, because silently dropping part of the
//! configuration (an ACL, a port) is worse than refusing to start.

use std::path::{Path, PathBuf};

use rmpv::Value;

use crate::glob::glob;
use crate::options::{truthy, OptMap, Origin, Origins};
use crate::pyval::{py_eq, py_str};
use crate::{yaml, ConfigError};

/// How deep `include` options may nest (Salt recurses until Python's stack runs out).
pub const MAX_INCLUDE_DEPTH: usize = 16;

/// Options read from files, with where each came from.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    pub opts: OptMap,
    pub origins: Origins,
    /// Warnings Salt logs while loading (include patterns matching nothing).
    pub warnings: Vec<String>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "a list",
        Value::Map(_) => "a mapping",
        Value::String(_) => "a string",
        Value::Binary(_) => "binary data",
        _ => "a scalar",
    }
}

/// Parses one file's text the way `_read_conf_file` does: a mapping (or nothing), with a
/// non-string `id` turned into its Python `str()`.
pub(crate) fn parse_conf(text: &[u8], path: &Path) -> Result<OptMap, ConfigError> {
    let doc = yaml::load_bytes(text).map_err(|error| ConfigError::Yaml {
        path: path.to_path_buf(),
        error,
    })?;
    let mut opts = match doc {
        Value::Map(pairs) => OptMap(pairs),
        // `safe_load(...) or {}`: any falsy document is an empty configuration.
        other if !truthy(&other) => OptMap::default(),
        other => {
            return Err(ConfigError::NotAMapping {
                path: path.to_path_buf(),
                found: type_name(&other),
            })
        }
    };
    if let Some(id) = opts.get("id") {
        let id = match id {
            Value::String(_) => None,
            Value::Array(_) | Value::Map(_) | Value::Binary(_) | Value::Ext(..) => {
                // Salt would use the Python repr of the list as the id; refuse instead.
                return Err(ConfigError::InvalidValue {
                    option: "id".to_owned(),
                    origin: Origin::File(path.to_path_buf()),
                    expected: "a string".to_owned(),
                    got: crate::validate::describe(id),
                });
            }
            scalar => Some(Value::from(py_str(scalar))),
        };
        if let Some(id) = id {
            opts.set("id", id);
        }
    }
    Ok(opts)
}

/// Reads and parses one configuration file.
pub(crate) fn read_conf_file(path: &Path) -> Result<OptMap, ConfigError> {
    tracing::debug!("Reading configuration from {}", path.display());
    let text = std::fs::read(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    parse_conf(&text, path)
}

/// `load_config`: the main file's options (with `conf_file` set to its path), or `None`
/// if it does not exist.
///
/// Deviation: Salt also treats an existing but unreadable file as missing; here that is
/// an error.
pub(crate) fn load_main(path: &Path) -> Result<Option<OptMap>, ConfigError> {
    if !path.exists() {
        tracing::debug!("Missing configuration file: {}", path.display());
        return Ok(None);
    }
    let mut opts = read_conf_file(path)?;
    opts.set("conf_file", Value::from(path.to_string_lossy().as_ref()));
    Ok(Some(opts))
}

fn expand_user(pattern: &str) -> String {
    if pattern == "~" || pattern.starts_with("~/") {
        if let Some(home) = std::env::var_os("HOME") {
            return format!("{}{}", home.to_string_lossy(), &pattern[1..]);
        }
    }
    pattern.to_owned()
}

/// `include_config`: every file matched by `include` (a pattern or a list of them),
/// relative to `orig_path`'s directory, merged as described in the module docs.
///
/// `option` names the option holding the patterns and `origin` where it was set, for
/// error messages.
pub(crate) fn include_config(
    include: &Value,
    orig_path: &Path,
    verbose: bool,
    option: &str,
    origin: &Origin,
    depth: usize,
) -> Result<Gathered, ConfigError> {
    let mut out = Gathered::default();
    if !truthy(include) {
        return Ok(out);
    }
    if depth > MAX_INCLUDE_DEPTH {
        return Err(ConfigError::IncludeDepth {
            path: orig_path.to_path_buf(),
        });
    }
    let invalid = || ConfigError::InvalidValue {
        option: option.to_owned(),
        origin: origin.clone(),
        expected: "a path glob or a list of path globs".to_owned(),
        got: crate::validate::describe(include),
    };
    let patterns: Vec<&str> = match include {
        Value::String(s) => vec![s.as_str().ok_or_else(invalid)?],
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => s.as_str().ok_or_else(invalid),
                _ => Err(invalid()),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(invalid()),
    };
    let base = orig_path.parent().unwrap_or(Path::new(""));
    for pattern in patterns {
        let expanded = expand_user(pattern);
        let full: PathBuf = if expanded.starts_with('/') {
            PathBuf::from(expanded)
        } else {
            base.join(expanded)
        };
        let mut matches = glob(&full);
        if matches.is_empty() && verbose {
            out.warnings.push(format!(
                "Warning parsing configuration file: \"include\" path/glob '{}' matches no files",
                full.display()
            ));
        }
        matches.sort_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
        for file in matches {
            tracing::debug!("Including configuration from '{}'", file.display());
            let mut opts = read_conf_file(&file)?;
            let mut origins = Origins::default();
            origins.record(&opts, &file);
            if let Some(Value::Map(new)) = opts.get("schedule") {
                if let Some(Value::Map(existing)) = out.opts.get_mut("schedule") {
                    // Salt shallow-updates the schedule first, so a job is replaced whole.
                    let mut merged = OptMap(std::mem::take(existing));
                    merged.update(OptMap(new.clone()));
                    *existing = merged.0;
                }
            }
            if let Some(nested) = opts.get("include").cloned() {
                let nested = include_config(
                    &nested,
                    &file,
                    verbose,
                    "include",
                    &Origin::File(file.clone()),
                    depth + 1,
                )?;
                opts.update(nested.opts);
                origins.extend(nested.origins);
                out.warnings.extend(nested.warnings);
            }
            dict_update(&mut out.opts.0, opts.0, true);
            out.origins.extend(origins);
        }
    }
    Ok(out)
}

/// `salt.utils.dictupdate.update(dest, upd, recursive_update=True, merge_lists)`.
pub(crate) fn dict_update(
    dest: &mut Vec<(Value, Value)>,
    upd: Vec<(Value, Value)>,
    merge_lists: bool,
) {
    let overlap = upd
        .iter()
        .any(|(k, _)| dest.iter().any(|(d, _)| py_eq(d, k)));
    for (key, value) in upd {
        let slot = dest.iter_mut().find(|(d, _)| py_eq(d, &key));
        match slot {
            None => dest.push((key, value)),
            Some(slot) if !overlap => slot.1 = value,
            Some(slot) => match (&mut slot.1, value) {
                (Value::Map(existing), Value::Map(new)) => dict_update(existing, new, merge_lists),
                (Value::Array(existing), Value::Array(new)) if merge_lists => {
                    let fresh: Vec<Value> = new
                        .into_iter()
                        .filter(|item| !existing.iter().any(|e| py_eq(e, item)))
                        .collect();
                    existing.extend(fresh);
                }
                (current, value) => *current = value,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(yaml: &str) -> Vec<(Value, Value)> {
        match yaml::load(yaml).unwrap() {
            Value::Map(m) => m,
            other => panic!("not a map: {other:?}"),
        }
    }

    #[test]
    fn dict_update_merges_nested_maps_and_lists_like_salt() {
        let mut dest = map("file_roots: {base: [/srv/b, /srv/a]}\nx: 1\nl: [1, 2]");
        dict_update(
            &mut dest,
            map("file_roots: {base: [/srv/c, /srv/a], dev: [/d]}\nx: 2\nl: [2, 3, 3]"),
            true,
        );
        assert_eq!(
            dest,
            map("file_roots: {base: [/srv/b, /srv/a, /srv/c], dev: [/d]}\nx: 2\nl: [1, 2, 3, 3]")
        );
    }

    #[test]
    fn dict_update_without_list_merge_replaces_lists() {
        let mut dest = map("l: [1]");
        dict_update(&mut dest, map("l: [2]"), false);
        assert_eq!(dest, map("l: [2]"));
    }

    #[test]
    fn numeric_id_becomes_its_python_string() {
        let opts = parse_conf(b"id: 0123", Path::new("/x")).unwrap();
        assert_eq!(opts.get("id"), Some(&Value::from("123")));
        let opts = parse_conf(b"id:", Path::new("/x")).unwrap();
        assert_eq!(opts.get("id"), Some(&Value::from("None")));
        assert!(parse_conf(b"id: [a]", Path::new("/x")).is_err());
    }

    #[test]
    fn falsy_documents_are_empty_and_others_must_be_mappings() {
        for text in ["", "~", "[]", "0", "''", "# only a comment"] {
            assert_eq!(
                parse_conf(text.as_bytes(), Path::new("/x")).unwrap(),
                OptMap::default()
            );
        }
        let err = parse_conf(b"- a", Path::new("/x/master")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configuration file /x/master must be a mapping of options, not a list"
        );
    }
}
