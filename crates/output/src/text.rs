//! `salt/output/txt.py` and `salt/output/raw.py`.

use crate::pprint;
use crate::py::{bytes_repr, bytes_splitlines, splitlines, Py};

/// `txt.output()`: `key: line` for every line of every value of a dict.
pub(crate) fn txt(data: &Py) -> String {
    let mut out = String::new();
    match data {
        Py::Dict(items) => {
            for (key, value) in items {
                let key = key.to_str();
                match value {
                    Py::Str(s) => {
                        for line in splitlines(s, false) {
                            out.push_str(&format!("{key}: {line}\n"));
                        }
                    }
                    Py::Bytes(b) => {
                        for line in bytes_splitlines(b) {
                            out.push_str(&format!("{key}: {}\n", bytes_repr(line)));
                        }
                    }
                    other => out.push_str(&format!("{key}: {}\n", other.to_str())),
                }
            }
        }
        Py::Str(s) => {
            out.push_str(s);
            out.push('\n');
        }
        other => {
            out.push_str(&pprint::pformat(other, 1));
            out.push('\n');
        }
    }
    out
}

/// `raw.output()`: `str(data)`.
pub(crate) fn raw(data: &Py) -> String {
    data.to_str()
}
