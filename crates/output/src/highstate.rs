//! `salt/output/highstate.py`: the state run report (`state.apply`, `state.highstate`,
//! `state.sls`, orchestrations), byte for byte.
//!
//! Everything the Python outputter does is reproduced: the `return`/`data`/`jid` envelope
//! unwrapping, `retcode` dropped from orchestration data, `state_compress_ids`, the
//! "Data failed to compile:" block for a list of errors, a string or integer return, the
//! "failed to record the order" notice, `__run_num__` ordering, every `state_output` mode
//! (`full`, `terse`, `mixed`, `changes`, `filter`, each with `_id`), `state_verbose`,
//! `state_output_diff`, `state_output_profile`, `state_output_pct`, `state_tabular`
//! (`True` or a template), changes through the nested outputter (indented 14), nested
//! highstate returns (`out: highstate` in changes, `state.orch`/`state.sls` names),
//! warnings wrapped by `textwrap`, the summary block, and colours.
//!
//! Salt mutates the return while formatting it (comments made strings, durations suffixed
//! with " ms", compressed states merged), and when the outputter raises `KeyError`,
//! `AttributeError` or `TypeError` part-way, `display_output` prints the mutated data with
//! the nested outputter. Halite formats a shared copy with the same mutations in the same
//! order, so that fallback prints what Salt prints too.
//!
//! Deviations, where Salt crashes or Python cannot be followed: where the Python
//! outputter raises an exception that `display_output` does not catch (an `IndexError`
//! for a state name with fewer than four `_|-` parts, a `ValueError` from a malformed
//! format string or an unparsable compressed name, a `UnicodeDecodeError` for a
//! non-UTF-8 host or error, recursion past Python's limit), the `salt` command dies with
//! a traceback; Halite prints the data with the nested outputter instead. Sorting
//! `__run_num__` values uses CPython's comparison sequence for fewer than 64 states, so
//! values that do not compare (mixed types, NaN) behave as in Python; above that, only
//! consistently ordered values are sorted as Python sorts them. A compressed count too
//! large for 64 bits, and format templates beyond the `pyfmt` module's limits, also fall
//! back to nested. `color_theme` is not read.

use std::cell::RefCell;
use std::rc::Rc;

use crate::color::{colors, Colors};
use crate::py::{is_space, splitlines, Py};
use crate::pyfmt::{self, Raised};
use crate::{pprint, textwrap, OutputOptions};

type Res<T> = Result<T, Raised>;

/// Deepest nesting of highstate returns formatted (Python's own recursion limit is near
/// 1000 frames, about 250 of these levels).
const MAX_DEPTH: usize = 200;

/// The highstate outputter's options: Salt's `state_*` settings as the CLI merged them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HighstateOptions {
    /// `state_output` (`--state-output`): `full`, `terse`, `mixed`, `changes` or
    /// `filter`, each optionally suffixed `_id`. Salt lowercases it and matches
    /// prefixes, so any other text means `full`. `None` when the configured value is not
    /// a string, which makes Salt's outputter raise (and the output fall back to nested)
    /// at the first state it shows.
    pub state_output: Option<String>,
    /// `state_verbose` (`--state-verbose`): false hides states that succeeded without
    /// changes.
    pub state_verbose: bool,
    /// `state_tabular`: how terse lines are laid out.
    pub state_tabular: StateTabular,
    /// `state_output_diff` (`--output-diff`): hide states that succeeded without changes.
    pub state_output_diff: bool,
    /// `state_output_profile`: start times and durations, and the total run time.
    pub state_output_profile: bool,
    /// `state_output_pct`: success and failure percentages in the summary.
    pub state_output_pct: bool,
    /// `state_compress_ids`: one line per ID and result for states with several names.
    pub state_compress_ids: bool,
    /// `filter` mode: results whose states are not shown (the job's `exclude=` keyword
    /// argument, else `state_output_exclude`).
    pub state_output_exclude: StateFilter,
    /// `filter` mode: results whose states are shown tersely (`terse=`, else
    /// `state_output_terse`).
    pub state_output_terse: StateFilter,
}

impl Default for HighstateOptions {
    /// Salt's master and minion defaults: `full`, verbose, with profile information.
    fn default() -> HighstateOptions {
        HighstateOptions {
            state_output: Some("full".to_owned()),
            state_verbose: true,
            state_tabular: StateTabular::Off,
            state_output_diff: false,
            state_output_profile: true,
            state_output_pct: false,
            state_compress_ids: false,
            state_output_exclude: StateFilter::default(),
            state_output_terse: StateFilter::default(),
        }
    }
}

impl HighstateOptions {
    /// Reads the options from a configuration (`get` looks an option up), with the
    /// outputter's own fallbacks for absent options (`full`, and false for the rest).
    pub fn from_config<'a>(get: impl Fn(&str) -> Option<&'a rmpv::Value>) -> HighstateOptions {
        let py = |name: &str| get(name).map(Py::from_msgpack);
        let flag = |name: &str| py(name).is_some_and(|v| v.truthy());
        let filter =
            |name: &str| py(name).map_or_else(StateFilter::default, |v| StateFilter::from_py(&v));
        HighstateOptions {
            state_output: match py("state_output") {
                None => Some("full".to_owned()),
                Some(Py::Str(s)) => Some(s),
                Some(_) => None,
            },
            state_verbose: flag("state_verbose"),
            state_tabular: match py("state_tabular") {
                Some(Py::Bool(true)) => StateTabular::Aligned,
                Some(Py::Str(template)) => StateTabular::Template(template),
                _ => StateTabular::Off,
            },
            state_output_diff: flag("state_output_diff"),
            state_output_profile: flag("state_output_profile"),
            state_output_pct: flag("state_output_pct"),
            state_compress_ids: flag("state_compress_ids"),
            state_output_exclude: filter("state_output_exclude"),
            state_output_terse: filter("state_output_terse"),
        }
    }

    /// Takes `filter` mode's `exclude` and `terse` from the job's arguments as `salt`
    /// parsed them (`__opts__["arg"]`): the last `{"__kwarg__": true, ...}` map wins.
    pub fn with_job_args(mut self, args: &rmpv::Value) -> HighstateOptions {
        let Py::List(items) = Py::from_msgpack(args) else {
            return self;
        };
        let kwargs = items.iter().rev().find_map(|item| match item {
            Py::Dict(entries) if entries.iter().any(|(k, _)| is_str(k, "__kwarg__")) => {
                Some(entries)
            }
            _ => None,
        });
        if let Some(kwargs) = kwargs {
            for (key, value) in kwargs {
                if is_str(key, "exclude") {
                    self.state_output_exclude = StateFilter::from_py(value);
                } else if is_str(key, "terse") {
                    self.state_output_terse = StateFilter::from_py(value);
                }
            }
        }
        self
    }
}

/// `state_tabular`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateTabular {
    /// Anything but `True` or a string: ` Name: ... - Function: ... - Result: ...`.
    #[default]
    Off,
    /// `True`: aligned columns.
    Aligned,
    /// A string: a `str.format` template for each terse line, given the colour, name,
    /// module, function, result word, colour reset and the state's return.
    Template(String),
}

/// `filter` mode's `exclude` or `terse` value, which Salt tests with
/// `str(result) in value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateFilter {
    /// A comma-separated string (split), or a list or dict (its string items or keys).
    Results(Vec<String>),
    /// A value `in` raises `TypeError` on (a number, a boolean, `None`, bytes).
    NotIterable,
}

impl Default for StateFilter {
    fn default() -> StateFilter {
        StateFilter::Results(Vec::new())
    }
}

impl StateFilter {
    /// The filter a configured or keyword value gives.
    pub fn from_value(value: &rmpv::Value) -> StateFilter {
        StateFilter::from_py(&Py::from_msgpack(value))
    }

    fn from_py(value: &Py) -> StateFilter {
        let strings = |items: &mut dyn Iterator<Item = &Py>| {
            items
                .filter_map(|item| match item {
                    Py::Str(s) => Some(s.clone()),
                    _ => None,
                })
                .collect()
        };
        match value {
            Py::Str(s) => StateFilter::Results(s.split(',').map(str::to_owned).collect()),
            Py::List(items) => StateFilter::Results(strings(&mut items.iter())),
            Py::Dict(items) => StateFilter::Results(strings(&mut items.iter().map(|(k, _)| k))),
            _ => StateFilter::NotIterable,
        }
    }

    fn contains(&self, result: &str) -> Res<bool> {
        match self {
            StateFilter::Results(items) => Ok(items.iter().any(|i| i == result)),
            StateFilter::NotIterable => Err(Raised),
        }
    }
}

fn is_str(value: &Py, text: &str) -> bool {
    matches!(value, Py::Str(s) if s == text)
}

/// A Python object as the outputter sees it: dicts and lists are shared and mutable, so
/// that a change made through one reference shows through every other, as in Python.
#[derive(Clone)]
enum V {
    /// Anything but a dict or a list.
    Scalar(Py),
    List(Rc<RefCell<Vec<V>>>),
    /// Keys are never dicts or lists.
    Dict(Rc<RefCell<Vec<(Py, V)>>>),
}

impl V {
    fn from_py(value: &Py) -> V {
        match value {
            Py::List(items) => V::list(items.iter().map(V::from_py).collect()),
            Py::Dict(items) => V::dict(
                items
                    .iter()
                    .map(|(k, v)| (k.clone(), V::from_py(v)))
                    .collect(),
            ),
            other => V::Scalar(other.clone()),
        }
    }

    fn to_py(&self) -> Py {
        match self {
            V::Scalar(p) => p.clone(),
            V::List(items) => Py::List(items.borrow().iter().map(V::to_py).collect()),
            V::Dict(items) => Py::Dict(
                items
                    .borrow()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_py()))
                    .collect(),
            ),
        }
    }

    fn list(items: Vec<V>) -> V {
        V::List(Rc::new(RefCell::new(items)))
    }

    fn dict(items: Vec<(Py, V)>) -> V {
        V::Dict(Rc::new(RefCell::new(items)))
    }

    fn str(text: impl Into<String>) -> V {
        V::Scalar(Py::Str(text.into()))
    }

    fn is_dict(&self) -> bool {
        matches!(self, V::Dict(_))
    }

    /// The items of a dict, `None` for anything else.
    fn items(&self) -> Option<Vec<(Py, V)>> {
        match self {
            V::Dict(items) => Some(items.borrow().clone()),
            _ => None,
        }
    }

    fn len(&self) -> Option<usize> {
        match self {
            V::Dict(items) => Some(items.borrow().len()),
            V::List(items) => Some(items.borrow().len()),
            V::Scalar(Py::Str(s)) => Some(s.chars().count()),
            V::Scalar(Py::Bytes(b)) => Some(b.len()),
            V::Scalar(_) => None,
        }
    }

    /// `d.get(key)` of a dict for any key; `None` when absent or not a dict.
    fn get_key(&self, key: &Py) -> Option<V> {
        match self {
            V::Dict(items) => items
                .borrow()
                .iter()
                .find(|(k, _)| k.same_key(key))
                .map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    fn get(&self, key: &str) -> Option<V> {
        self.get_key(&Py::Str(key.to_owned()))
    }

    /// `key in d` for a dict (false for anything else).
    fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// `d[key]`: `KeyError` when absent, `TypeError` when not a dict.
    fn item(&self, key: &str) -> Res<V> {
        self.get(key).ok_or(Raised)
    }

    /// `d[key] = value` (a no-op on anything but a dict).
    fn set_key(&self, key: Py, value: V) {
        if let V::Dict(items) = self {
            let mut items = items.borrow_mut();
            match items.iter_mut().find(|(k, _)| k.same_key(&key)) {
                Some(slot) => slot.1 = value,
                None => items.push((key, value)),
            }
        }
    }

    fn set(&self, key: &str, value: V) {
        self.set_key(Py::Str(key.to_owned()), value);
    }

    fn remove(&self, key: &str) {
        if let V::Dict(items) = self {
            items.borrow_mut().retain(|(k, _)| !is_str(k, key));
        }
    }

    fn truthy(&self) -> bool {
        match self {
            V::Scalar(p) => p.truthy(),
            V::List(items) => !items.borrow().is_empty(),
            V::Dict(items) => !items.borrow().is_empty(),
        }
    }

    /// `str(x)`.
    fn to_str(&self) -> String {
        match self {
            V::Scalar(p) => p.to_str(),
            other => other.to_py().to_str(),
        }
    }

    /// The value as a dict key: `TypeError` for dicts and lists.
    fn key(&self) -> Res<Py> {
        match self {
            V::Scalar(p) => Ok(p.clone()),
            _ => Err(Raised),
        }
    }

    fn scalar(&self) -> Option<&Py> {
        match self {
            V::Scalar(p) => Some(p),
            _ => None,
        }
    }

    fn is_false(&self) -> bool {
        matches!(self, V::Scalar(Py::Bool(false)))
    }

    fn is_none(&self) -> bool {
        matches!(self, V::Scalar(Py::None))
    }

    /// `"\n".join(x)`: every item must be a string.
    fn join_lines(&self) -> Res<String> {
        let items: Vec<Py> = match self.to_py() {
            Py::Str(s) => s.chars().map(|c| Py::Str(c.to_string())).collect(),
            Py::List(items) => items,
            Py::Dict(items) => items.into_iter().map(|(k, _)| k).collect(),
            _ => return Err(Raised),
        };
        let lines = items
            .into_iter()
            .map(|item| match item {
                Py::Str(s) => Ok(s),
                _ => Err(Raised),
            })
            .collect::<Res<Vec<String>>>()?;
        Ok(lines.join("\n"))
    }
}

/// `a < b` for two values.
fn lt(a: &V, b: &V) -> Res<bool> {
    a.to_py().py_lt(&b.to_py()).ok_or(Raised)
}

/// The text the highstate outputter gives for `data` (before `display_output`'s
/// `rstrip`), or, where the Python outputter raises, the nested outputter's text for
/// the data as the outputter left it.
pub(crate) fn highstate(data: &Py, opts: &OutputOptions) -> String {
    let work = V::from_py(data);
    let printer = Printer {
        opts,
        hs: &opts.highstate,
        c: colors(opts.color),
    };
    match printer.output(&work, 1, 0) {
        Ok(text) => text,
        Err(Raised) => crate::nested_printout(&work.to_py(), opts),
    }
}

struct Printer<'a> {
    opts: &'a OutputOptions,
    hs: &'a HighstateOptions,
    c: &'static Colors,
}

/// Per-result counts, keyed like a Python dict (`True`, `1` and `1.0` are one key).
#[derive(Default)]
struct Counts(Vec<(Py, i64)>);

impl Counts {
    fn slot(&mut self, key: &Py) -> usize {
        match self.0.iter().position(|(k, _)| k.same_key(key)) {
            Some(i) => i,
            None => {
                self.0.push((key.clone(), 0));
                self.0.len() - 1
            }
        }
    }

    fn add(&mut self, key: &Py, n: i64) {
        let i = self.slot(key);
        if let Some((_, count)) = self.0.get_mut(i) {
            *count = count.saturating_add(n);
        }
    }

    fn get(&self, key: &Py) -> i64 {
        self.0
            .iter()
            .find(|(k, _)| k.same_key(key))
            .map_or(0, |(_, n)| *n)
    }

    fn contains(&self, key: &Py) -> bool {
        self.0.iter().any(|(k, _)| k.same_key(key))
    }

    fn total(&self) -> i64 {
        self.0.iter().map(|(_, n)| *n).fold(0, i64::saturating_add)
    }
}

impl Printer<'_> {
    /// `output(data, indent_level=...)`; `Err` also where Python returns a non-string.
    fn output(&self, data: &V, indent_level: usize, depth: usize) -> Res<String> {
        if depth > MAX_DEPTH {
            return Err(Raised);
        }
        let mut data = data.clone();
        if let Some(inner) = data.get("return") {
            data = inner;
        }
        if let Some(inner) = data.get("data") {
            data = inner;
        }
        if let Some(items) = data.items() {
            if let [(_, only)] = items.as_slice() {
                if only.has("jid") && only.has("fun") {
                    let ret = only.get("return").unwrap_or_else(|| V::dict(Vec::new()));
                    if !ret.is_dict() {
                        return Err(Raised);
                    }
                    if let Some(inner) = ret.get("data") {
                        data = inner;
                    }
                }
            }
        }
        let keys: Vec<Py> = match &data {
            V::Scalar(Py::Str(s)) => return Ok(s.clone()),
            V::Scalar(Py::None) => return Ok("None".to_owned()),
            V::Dict(items) => items.borrow().iter().map(|(k, _)| k.clone()).collect(),
            // An int is returned as it is (and is not text); nothing else has `keys()`.
            _ => return Err(Raised),
        };
        let mut masters = 0;
        for key in &keys {
            let Py::Str(key) = key else {
                return Err(Raised);
            };
            if key.ends_with("_master") {
                masters += 1;
            }
        }
        if masters == 1 && keys.iter().any(|k| is_str(k, "retcode")) {
            data.remove("retcode");
        }
        if self.hs.state_compress_ids {
            data = compress_ids(&data);
        }
        let mut hosts = Vec::new();
        for (host, hostdata) in data.items().unwrap_or_default() {
            hosts.push(self.format_host(&host, &hostdata, indent_level, depth)?.0);
        }
        Ok(hosts.join("\n"))
    }

    /// `_format_host`: the host's block and whether anything changed.
    fn format_host(
        &self,
        host: &Py,
        data: &V,
        indent_level: usize,
        depth: usize,
    ) -> Res<(String, bool)> {
        let c = self.c;
        if matches!(host, Py::Bytes(_)) {
            // `salt.utils.data.decode` raises UnicodeDecodeError.
            return Err(Raised);
        }
        let mut hcolor = c.green;
        let mut hstrs: Vec<String> = Vec::new();
        let mut nchanges: i64 = 0;
        match data {
            V::Scalar(p @ (Py::Int(_) | Py::Bool(_))) => {
                nchanges = 1;
                hstrs.push(format!("{}    {}{}", c.green, p.to_str(), c.endc));
                hcolor = c.cyan;
            }
            V::Scalar(Py::Str(s)) => {
                nchanges = 1;
                for line in splitlines(s, false) {
                    hstrs.push(format!("{}    {line}{}", c.green, c.endc));
                }
                hcolor = c.cyan;
            }
            V::List(items) => {
                hcolor = c.light_red;
                hstrs.push(format!("    {hcolor}Data failed to compile:{}", c.endc));
                let errors: Vec<Py> = items.borrow().iter().map(V::to_py).collect();
                for err in errors {
                    let mut text = err.to_str();
                    if self.opts.strip_colors {
                        // `salt.utils.data.decode` raises on bytes that are not UTF-8.
                        if contains_bytes(&err) {
                            return Err(Raised);
                        }
                        if matches!(err, Py::Str(_)) {
                            text = text.replace('\u{1b}', "?");
                        }
                    }
                    hstrs.push(format!("{hcolor}----------\n    {text}{}", c.endc));
                }
            }
            V::Dict(_) => {
                let (lines, color, n) = self.format_states(host, data, indent_level, depth)?;
                hstrs = lines;
                nchanges = n;
                if let Some(color) = color {
                    hcolor = color;
                }
            }
            V::Scalar(_) => {}
        }
        let mut host_text = host.to_str();
        if self.opts.strip_colors && matches!(host, Py::Str(_)) {
            host_text = host_text.replace('\u{1b}', "?");
        }
        hstrs.insert(0, format!("{hcolor}{host_text}:{}", c.endc));
        Ok((hstrs.join("\n"), nchanges > 0))
    }

    /// The dict branch of `_format_host`: each state, then the summary. Returns the lines,
    /// the host colour the states call for, and the number of changes.
    fn format_states(
        &self,
        host: &Py,
        data: &V,
        indent_level: usize,
        depth: usize,
    ) -> Res<(Vec<String>, Option<&'static str>, i64)> {
        let c = self.c;
        let mut hstrs: Vec<String> = Vec::new();
        let mut hcolor: Option<&'static str> = None;
        let mut nchanges: i64 = 0;
        let mut rcounts = Counts::default();
        let mut rdurations: Vec<f64> = Vec::new();
        let mut pdurations: Vec<f64> = Vec::new();
        let mut states: Vec<(Py, V)> = Vec::new();
        for (tname, info) in data.items().unwrap_or_default() {
            if info.is_dict()
                && !is_str(&tname, "changes")
                && info.truthy()
                && !info.has("__run_num__")
            {
                hstrs.insert(0, pprint::pformat(&info.to_py(), 1));
                hstrs.insert(
                    0,
                    "The State execution failed to record the order in which all states \
                     were executed. The state return missing data is:"
                        .to_owned(),
                );
            }
            if info.is_dict() && info.has("result") {
                states.push((tname, info));
            }
        }
        let keys: Vec<V> = states
            .iter()
            .map(|(_, info)| info.get("__run_num__").unwrap_or(V::Scalar(Py::Int(0))))
            .collect();
        let order = python_sort(&keys)?;
        for index in order {
            let Some((tname, ret)) = states.get(index) else {
                continue;
            };
            let result = ret.item("result")?;
            // `rcounts.setdefault(result, 0)`: an unhashable result raises.
            let result_key = result.key()?;
            let mut compressed_count: i64 = 1;
            if self.hs.state_compress_ids {
                let Py::Str(name) = tname else {
                    return Err(Raised);
                };
                if name.contains("_|-state_compressed_") {
                    let parts: Vec<&str> = name.split("_|-").collect();
                    let [_, id, _, _] = parts.as_slice() else {
                        return Err(Raised);
                    };
                    if let Some(n) = compressed_suffix(id)? {
                        compressed_count = n;
                    }
                }
            }
            rcounts.add(&result_key, compressed_count);
            let duration = ret.get("duration").unwrap_or(V::Scalar(Py::Int(0)));
            let parsed = duration_float(&duration)?;
            if let Some(d) = parsed {
                if ret.has("__parallel__") {
                    pdurations.push(d);
                } else {
                    rdurations.push(d);
                }
            }
            let mut tcolor = c.green;
            let orchestration = ret.get("name").is_some_and(|n| {
                ["state.orch", "state.orchestrate", "state.sls"]
                    .iter()
                    .any(|s| n.scalar().is_some_and(|p| is_str(p, s)))
            });
            let (schanged, ctext) = if orchestration {
                let nested = self.output(&ret.item("changes")?, indent_level + 1, depth + 1)?;
                nchanges += 1;
                (
                    true,
                    indent_lines(&format!("\n{nested}"), &" ".repeat(14 * indent_level)),
                )
            } else {
                let changes = ret.item("changes")?;
                let (schanged, ctext) = self.format_changes(&changes, depth)?;
                if schanged && compressed_count > 1 {
                    let compressed = match &changes {
                        V::Dict(_) => changes
                            .get("compressed changes")
                            .unwrap_or_else(|| V::dict(Vec::new())),
                        _ => return Err(Raised),
                    };
                    let n = compressed.len().ok_or(Raised)? as i64;
                    nchanges += if n == 0 { 1 } else { n };
                } else if schanged {
                    nchanges += 1;
                }
                (schanged, ctext)
            };
            if self.hs.state_output_diff && result.truthy() && !schanged {
                continue;
            }
            if !self.hs.state_verbose && result.truthy() && !schanged {
                continue;
            }
            if schanged {
                tcolor = c.cyan;
            }
            if result.is_false() {
                hcolor = Some(c.red);
                tcolor = c.red;
            }
            if result.is_none() {
                hcolor = Some(c.light_yellow);
                tcolor = c.light_yellow;
            }
            let state_output = self
                .hs
                .state_output
                .as_deref()
                .ok_or(Raised)?
                .to_lowercase();
            let Py::Str(name) = tname else {
                return Err(Raised);
            };
            let mut comps: Vec<String> = name.split("_|-").map(str::to_owned).collect();
            if state_output.ends_with("_id") {
                let id = comps.get(1).cloned().ok_or(Raised)?;
                *comps.get_mut(2).ok_or(Raised)? = id;
            }
            let terse = if state_output.starts_with("filter") {
                let shown = result_key.to_str();
                if self.hs.state_output_terse.contains(&shown)? {
                    true
                } else if self.hs.state_output_exclude.contains(&shown)? {
                    continue;
                } else {
                    false
                }
            } else {
                state_output.starts_with("terse")
                    || (state_output.starts_with("mixed") && !result.is_false())
                    || (state_output.starts_with("changes") && result.truthy() && !schanged)
            };
            if terse {
                hstrs.push(self.format_terse(tcolor, &comps, ret)?);
                continue;
            }
            hstrs.extend(self.format_full(tcolor, &comps, ret, &ctext, &mut rcounts)?);
        }
        hstrs.extend(self.summary(host, &rcounts, nchanges, &rdurations, &pdurations));
        Ok((hstrs, hcolor, nchanges))
    }

    /// The full block of one state (the `state_lines` of `_format_host`).
    fn format_full(
        &self,
        tcolor: &str,
        comps: &[String],
        ret: &V,
        ctext: &str,
        rcounts: &mut Counts,
    ) -> Res<Vec<String>> {
        let c = self.c;
        let endc = c.endc;
        let profile = self.hs.state_output_profile && ret.has("start_time");
        let id = comps.get(1).ok_or(Raised)?;
        if comps.get(2).is_none() {
            return Err(Raised);
        }
        let comment = ret.item("comment")?;
        let comment = match comment {
            V::Scalar(Py::Str(s)) => s,
            other => {
                let text = other.to_str();
                ret.set("comment", V::str(text.clone()));
                text
            }
        };
        let mut comment = comment
            .trim_matches(is_space)
            .replace('\n', &format!("\n{}", " ".repeat(14)));
        if let Some(extra) = ret.get("data") {
            match &extra {
                V::List(items) => {
                    let items: Vec<V> = items.borrow().clone();
                    for item in items {
                        comment = format!("{comment} {}", item.to_str());
                    }
                }
                V::Dict(_) => {
                    for (key, value) in extra.items().unwrap_or_default() {
                        comment = format!("{comment}\n\t\t{}: {}", key.to_str(), value.to_str());
                    }
                }
                V::Scalar(p) => comment = format!("{comment} {}", p.to_str()),
            }
        }
        for detail in ["start_time", "duration"] {
            if !ret.has(detail) {
                ret.set(detail, V::str(""));
            }
        }
        let duration = ret.item("duration")?;
        if !matches!(&duration, V::Scalar(Py::Str(s)) if s.is_empty()) {
            ret.set("duration", V::str(format!("{} ms", duration.to_str())));
        }
        let function = format!(
            "{}.{}",
            comps.first().ok_or(Raised)?,
            comps.get(3).ok_or(Raised)?
        );
        let result = ret.item("result")?.to_str();
        let mut lines = vec![
            format!("{tcolor}----------{endc}"),
            format!("    {tcolor}      ID: {id}{endc}"),
            format!("    {tcolor}Function: {function}{endc}"),
            format!("    {tcolor}  Result: {result}{endc}"),
            format!("    {tcolor} Comment: {comment}{endc}"),
        ];
        if profile {
            let started = ret.item("start_time")?.to_str();
            let duration = ret.item("duration")?.to_str();
            lines.push(format!("    {tcolor} Started: {started}{endc}"));
            lines.push(format!("    {tcolor}Duration: {duration}{endc}"));
        }
        if comps.get(1) != comps.get(2) {
            let name = comps.get(2).ok_or(Raised)?;
            lines.insert(3, format!("    {tcolor}    Name: {name}{endc}"));
        }
        lines.push(format!("{tcolor}     Changes:   {ctext}{endc}"));
        if let Some(warnings) = ret.get("warnings") {
            rcounts.add(&Py::Str("warnings".to_owned()), 1);
            let text = warnings.join_lines()?;
            let wrapped = textwrap::fill(&text, 80, &" ".repeat(14)).ok_or(Raised)?;
            lines.push(format!(
                "   {} Warnings: {}{endc}",
                c.light_red,
                wrapped.trim_start_matches(is_space)
            ));
        }
        Ok(lines)
    }

    /// `_format_terse`.
    fn format_terse(&self, tcolor: &str, comps: &[String], ret: &V) -> Res<String> {
        let c = self.c;
        let mut result = "Clean";
        if ret.item("changes")?.truthy() {
            result = "Changed";
        }
        let state_result = ret.item("result")?;
        if state_result.is_false() {
            result = "Failed";
        } else if state_result.is_none() {
            result = "Differs";
        }
        let profile = self.hs.state_output_profile && ret.has("start_time");
        let template = match &self.hs.state_tabular {
            StateTabular::Aligned => {
                let mut t = String::new();
                if let Some(warnings) = ret.get("warnings") {
                    t.push_str(&format!(
                        "{}Warnings:\n{}{}\n",
                        c.light_red,
                        warnings.join_lines()?,
                        c.endc
                    ));
                }
                t.push_str("{0}");
                if profile {
                    t.push_str("{6[start_time]!s} [{6[duration]!s:>7} ms] ");
                }
                t.push_str("{2:>10}.{3:<10} {4:7}   Name: {1}{5}");
                t
            }
            StateTabular::Template(template) => template.clone(),
            StateTabular::Off => {
                let mut t = String::new();
                if let Some(warnings) = ret.get("warnings") {
                    t.push_str(&format!(
                        "{}Warnings:\n{}{}",
                        c.light_red,
                        warnings.join_lines()?,
                        c.endc
                    ));
                }
                t.push_str(" {0} Name: {1} - Function: {2}.{3} - Result: {4}");
                if profile {
                    t.push_str(" - Started: {6[start_time]!s} - Duration: {6[duration]!s} ms");
                }
                t.push_str("{5}");
                t
            }
        };
        let s = |text: &str| Py::Str(text.to_owned());
        let args = [
            s(tcolor),
            s(comps.get(2).ok_or(Raised)?),
            s(comps.first().ok_or(Raised)?),
            s(comps.last().ok_or(Raised)?),
            s(result),
            s(c.endc),
            ret.to_py(),
        ];
        pyfmt::format(&template, &args)
    }

    /// `_format_changes`: whether the state changed something, and the text after
    /// "Changes:".
    fn format_changes(&self, changes: &V, depth: usize) -> Res<(bool, String)> {
        if !changes.truthy() {
            return Ok((false, String::new()));
        }
        if !changes.is_dict() {
            return Ok((true, format!("Invalid Changes data: {}", changes.to_str())));
        }
        let ret = changes.get("ret").filter(|r| !r.is_none());
        let highstate = changes
            .get("out")
            .is_some_and(|o| o.scalar().is_some_and(|p| is_str(p, "highstate")));
        match ret {
            Some(ret) if highstate => {
                let hosts = ret.items().ok_or(Raised)?;
                let mut ctext = String::new();
                let mut changed = false;
                for (host, hostdata) in hosts {
                    let (text, c) = self.format_host(&host, &hostdata, 1, depth + 1)?;
                    ctext.push('\n');
                    let lines: Vec<String> = splitlines(&text, false)
                        .into_iter()
                        .map(|l| format!("{}{l}", " ".repeat(14)))
                        .collect();
                    ctext.push_str(&lines.join("\n"));
                    changed = changed || c;
                }
                Ok((changed, ctext))
            }
            _ => {
                let nested =
                    crate::nested::nested(&changes.to_py(), self.c, 0, 14, self.opts.strip_colors);
                Ok((true, format!("\n{}", crate::py::rstrip(&nested))))
            }
        }
    }

    /// The summary block.
    fn summary(
        &self,
        host: &Py,
        rcounts: &Counts,
        nchanges: i64,
        rdurations: &[f64],
        pdurations: &[f64],
    ) -> Vec<String> {
        let c = self.c;
        let endc = c.endc;
        let mut out = Vec::new();
        let count_max_len = rcounts
            .0
            .iter()
            .map(|(_, n)| n.to_string().len())
            .max()
            .unwrap_or(0);
        let line_max_len = "Succeeded".len() + count_max_len + 2;
        let counts = |label: &str, count: &str| {
            let width = line_max_len.saturating_sub(label.chars().count() + 2);
            format!("{label}: {count:>width$}")
        };
        let rule = "-".repeat(line_max_len);
        out.push(format!(
            "{}\nSummary for {}\n{rule}{endc}",
            c.cyan,
            host.to_str()
        ));
        let not_run = rcounts.get(&Py::None);
        let mut changestats = Vec::new();
        if rcounts.contains(&Py::None) && not_run > 0 {
            changestats.push(format!("{}unchanged={not_run}{endc}", c.light_yellow));
        }
        if nchanges > 0 {
            changestats.push(format!("{}changed={nchanges}{endc}", c.green));
        }
        let changestats = if changestats.is_empty() {
            String::new()
        } else {
            format!(" ({})", changestats.join(", "))
        };
        let succeeded = rcounts.get(&Py::Bool(true)).saturating_add(not_run);
        out.push(format!(
            "{}{}{endc}{changestats}",
            c.green,
            counts("Succeeded", &succeeded.to_string())
        ));
        let failed = rcounts.get(&Py::Bool(false));
        let failed_color = if failed != 0 { c.red } else { c.cyan };
        out.push(format!(
            "{failed_color}{}{endc}",
            counts("Failed", &failed.to_string())
        ));
        let warnings = rcounts.get(&Py::Str("warnings".to_owned()));
        let run = rcounts.total().saturating_sub(warnings);
        if self.hs.state_output_pct && run != 0 {
            let pct = |n: i64| {
                let ratio = (n as f64 / run as f64) * 100.0;
                let rounded: f64 = format!("{ratio:.2}").parse().unwrap_or(ratio);
                crate::py::float_repr(rounded)
            };
            out.push(format!(
                "{}{}{endc}",
                c.green,
                counts("Success %", &pct(succeeded))
            ));
            out.push(format!(
                "{failed_color}{}{endc}",
                counts("Failure %", &pct(failed))
            ));
        }
        if warnings != 0 {
            out.push(format!(
                "{}{}{endc}",
                c.light_red,
                counts("Warnings", &warnings.to_string())
            ));
        }
        let width = line_max_len.saturating_sub(7);
        out.push(format!(
            "{}{rule}\nTotal states run: {run:>width$}{endc}",
            c.cyan
        ));
        if self.hs.state_output_profile {
            let mut total: Option<f64> = None;
            for d in rdurations {
                total = Some(total.unwrap_or(0.0) + d);
            }
            let mut slowest: Option<f64> = None;
            for &d in pdurations {
                slowest = Some(match slowest {
                    Some(m) if d.partial_cmp(&m) != Some(std::cmp::Ordering::Greater) => m,
                    _ => d,
                });
            }
            if let Some(p) = slowest {
                total = Some(total.unwrap_or(0.0) + p);
            }
            let mut sum = total.unwrap_or(0.0);
            let mut unit = "ms";
            if sum > 999.0 {
                sum /= 1000.0;
                unit = "s";
            }
            let width = line_max_len.saturating_sub(5);
            out.push(format!(
                "{}Total run time: {:>width$} {unit}{endc}",
                c.cyan,
                pyfmt::fixed(sum, 3)
            ));
        }
        out
    }
}

/// Whether a value holds bytes that are not UTF-8 (which `salt.utils.data.decode` refuses).
fn contains_bytes(value: &Py) -> bool {
    match value {
        Py::Bytes(_) => true,
        Py::List(items) => items.iter().any(contains_bytes),
        Py::Dict(items) => items
            .iter()
            .any(|(k, v)| contains_bytes(k) || contains_bytes(v)),
        _ => false,
    }
}

/// Puts `pad` at every line start the way `re.sub("^", pad, text, flags=re.M)` does: at
/// the start and after every `\n`.
fn indent_lines(text: &str, pad: &str) -> String {
    let mut out = String::with_capacity(text.len());
    out.push_str(pad);
    for c in text.chars() {
        out.push(c);
        if c == '\n' {
            out.push_str(pad);
        }
    }
    out
}

/// `float(x)` of a state's duration: `Ok(None)` where Salt logs "Cannot parse a float"
/// and goes on, `Err` where it raises.
fn duration_float(value: &V) -> Res<Option<f64>> {
    match value {
        V::Scalar(Py::Int(i)) => Ok(Some(*i as f64)),
        V::Scalar(Py::Bool(b)) => Ok(Some(if *b { 1.0 } else { 0.0 })),
        V::Scalar(Py::Float(f)) => Ok(Some(*f)),
        V::Scalar(Py::Str(s)) => Ok(parse_float(s).or_else(|| {
            let head = s.split_once(" ms").map_or(s.as_str(), |(head, _)| head);
            parse_float(head)
        })),
        _ => Err(Raised),
    }
}

/// Python's `float(str)` for ASCII text: surrounding whitespace, a sign, `inf`,
/// `infinity` and `nan` in any case, and `_` between digits.
fn parse_float(text: &str) -> Option<f64> {
    let t = text.trim_matches(is_space);
    let (negative, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let lower = body.to_ascii_lowercase();
    let value = match lower.as_str() {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => {
            let chars: Vec<char> = body.chars().collect();
            let valid = chars
                .first()
                .is_some_and(|c| c.is_ascii_digit() || *c == '.')
                && chars
                    .iter()
                    .all(|c| c.is_ascii_digit() || matches!(c, '_' | '.' | 'e' | 'E' | '+' | '-'))
                && chars.iter().enumerate().all(|(i, c)| {
                    *c != '_'
                        || (i > 0
                            && chars.get(i - 1).is_some_and(char::is_ascii_digit)
                            && chars.get(i + 1).is_some_and(char::is_ascii_digit))
                });
            if !valid {
                return None;
            }
            body.replace('_', "").parse::<f64>().ok()?
        }
    };
    Some(if negative { -value } else { value })
}

/// The count of a compressed state's ID, `re.search(r"\((\d+)\)$", id)`; `Err` when it
/// does not fit 64 bits.
fn compressed_suffix(id: &str) -> Res<Option<i64>> {
    static RE: std::sync::OnceLock<Option<fancy_regex::Regex>> = std::sync::OnceLock::new();
    let Some(re) = RE
        .get_or_init(|| fancy_regex::Regex::new(r"\((\d+)\)\n?\z").ok())
        .as_ref()
    else {
        return Err(Raised);
    };
    let Ok(Some(caps)) = re.captures(id) else {
        return Ok(None);
    };
    let Some(digits) = caps.get(1) else {
        return Ok(None);
    };
    let mut n: i64 = 0;
    for c in digits.as_str().chars() {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(decimal_value(c)))
            .ok_or(Raised)?;
    }
    Ok(Some(n))
}

/// The value of a Unicode decimal digit: decimal digits come in runs of ten from zero.
fn decimal_value(c: char) -> i64 {
    if let Some(d) = c.to_digit(10) {
        return i64::from(d);
    }
    static DIGIT: std::sync::OnceLock<Option<fancy_regex::Regex>> = std::sync::OnceLock::new();
    let is_digit = |cp: u32| {
        let re = DIGIT.get_or_init(|| fancy_regex::Regex::new(r"\A\d\z").ok());
        char::from_u32(cp).is_some_and(|c| {
            re.as_ref()
                .is_some_and(|re| re.is_match(c.encode_utf8(&mut [0; 4])).unwrap_or(false))
        })
    };
    let mut start = u32::from(c);
    while start > 0 && is_digit(start - 1) {
        start -= 1;
    }
    i64::from((u32::from(c) - start) % 10)
}

/// `sorted(range(len(keys)), key=keys.__getitem__)` with Python's `<`: CPython's run
/// detection and binary insertion below 64 items (the whole algorithm at that size), a
/// stable sort above.
fn python_sort(keys: &[V]) -> Res<Vec<usize>> {
    let keys: Vec<Py> = keys.iter().map(V::to_py).collect();
    let less = |a: usize, b: usize| -> Res<bool> {
        match (keys.get(a), keys.get(b)) {
            (Some(x), Some(y)) => x.py_lt(y).ok_or(Raised),
            _ => Err(Raised),
        }
    };
    let n = keys.len();
    let mut order: Vec<usize> = (0..n).collect();
    if n < 2 {
        return Ok(order);
    }
    if n >= 64 {
        let mut failed = false;
        order.sort_by(|&a, &b| match (less(a, b), less(b, a)) {
            (Ok(true), _) => std::cmp::Ordering::Less,
            (Ok(false), Ok(true)) => std::cmp::Ordering::Greater,
            (Ok(false), Ok(false)) => std::cmp::Ordering::Equal,
            _ => {
                failed = true;
                std::cmp::Ordering::Equal
            }
        });
        return if failed { Err(Raised) } else { Ok(order) };
    }
    let at = |order: &[usize], i: usize| order.get(i).copied().ok_or(Raised);
    let mut run = 2;
    if less(1, 0)? {
        while run < n && less(run, run - 1)? {
            run += 1;
        }
        order[..run].reverse();
    } else {
        while run < n && !less(run, run - 1)? {
            run += 1;
        }
    }
    for start in run..n {
        let pivot = at(&order, start)?;
        let (mut lo, mut hi) = (0, start);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if less(pivot, at(&order, mid)?)? {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        order.remove(start);
        order.insert(lo, pivot);
    }
    Ok(order)
}

/// `_compress_ids`: states with several names under one ID and result merged into one;
/// where Salt's attempt raises, the data as the attempt left it.
fn compress_ids(data: &V) -> V {
    try_compress(data).unwrap_or_else(|Raised| data.clone())
}

/// The `_|-`-joined key `_compress_ids` counts states by.
fn compress_key(tname: &Py, info: &V) -> Res<String> {
    let Py::Str(tname) = tname else {
        return Err(Raised);
    };
    let module = tname.split("_|-").next().unwrap_or_default();
    Ok([
        module.to_owned(),
        info.item("__id__")?.to_str(),
        info.item("__sls__")?.to_str(),
        info.item("result")?.to_str(),
    ]
    .join("_"))
}

fn try_compress(data: &V) -> Res<V> {
    let compressed = V::dict(Vec::new());
    for (host, hostdata) in data.items().ok_or(Raised)? {
        let out = V::dict(Vec::new());
        compressed.set_key(host, out.clone());
        let entries = hostdata.items().ok_or(Raised)?;
        let mut counts: Vec<(String, i64)> = Vec::new();
        for (tname, info) in &entries {
            let key = compress_key(tname, info)?;
            match counts.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 += 1,
                None => counts.push((key, 1)),
            }
        }
        for (tname, info) in entries {
            let key = compress_key(&tname, &info)?;
            let count = counts
                .iter()
                .find(|(k, _)| *k == key)
                .map_or(1, |(_, n)| *n);
            if count == 1 {
                out.set_key(tname, info);
                continue;
            }
            let Py::Str(name) = &tname else {
                return Err(Raised);
            };
            let mut comps: Vec<String> = name.split("_|-").map(str::to_owned).collect();
            let id = info.item("__id__")?.to_str();
            let replaced = format!(
                "state_compressed_{}_{id}_{}",
                info.item("__sls__")?.to_str(),
                info.item("result")?.to_str()
            );
            *comps.get_mut(2).ok_or(Raised)? = replaced;
            *comps.get_mut(1).ok_or(Raised)? = format!("{id} ({count})");
            let new_name = comps.join("_|-");
            let Some(first) = out.get(&new_name) else {
                out.set(&new_name, info);
                continue;
            };
            merge_compressed(&first, &info)?;
        }
    }
    Ok(compressed)
}

/// Folds `info` into the first state of its compressed group, as `_compress_ids` does.
fn merge_compressed(first: &V, info: &V) -> Res<()> {
    let earlier = |key: &str| -> Res<V> {
        let mine = info.item(key)?;
        let theirs = first.item(key)?;
        Ok(if lt(&theirs, &mine)? { theirs } else { mine })
    };
    let run_num = earlier("__run_num__")?;
    first.set("__run_num__", run_num);
    let total = add(
        &add(&Py::Int(0), &info.item("duration")?)?,
        &first.item("duration")?,
    )?;
    first.set("duration", V::Scalar(round3(total)));
    let start = earlier("start_time")?;
    first.set("start_time", start);
    let has = |v: &V| v.get("changes").is_some_and(|c| c.truthy());
    let compressed_changes = |name: Py, changes: V| {
        V::dict(vec![(
            Py::Str("compressed changes".to_owned()),
            V::dict(vec![(name, changes)]),
        )])
    };
    if has(first) && has(info) {
        let changes = first.item("changes")?;
        if !changes.is_dict() {
            return Err(Raised);
        }
        if !changes
            .get("compressed changes")
            .is_some_and(|c| c.truthy())
        {
            let name = first.item("name")?.key()?;
            first.set("changes", compressed_changes(name, changes));
        }
        let target = first.item("changes")?.item("compressed changes")?;
        if !target.is_dict() {
            return Err(Raised);
        }
        let name = info.item("name")?.key()?;
        target.set_key(name, info.item("changes")?);
    } else if has(info) {
        let name = info.item("name")?.key()?;
        first.set("changes", compressed_changes(name, info.item("changes")?));
    }
    Ok(())
}

/// Python's `a + b` for numbers (`TypeError` for anything else).
fn add(a: &Py, b: &V) -> Res<Py> {
    let b = b.scalar().ok_or(Raised)?;
    let int = |p: &Py| match p {
        Py::Int(i) => Some(*i),
        Py::Bool(b) => Some(i128::from(*b)),
        _ => None,
    };
    let float = |p: &Py| match p {
        Py::Float(f) => Some(*f),
        other => int(other).map(|i| i as f64),
    };
    match (int(a), int(b)) {
        (Some(x), Some(y)) => x.checked_add(y).map(Py::Int).ok_or(Raised),
        _ => match (float(a), float(b)) {
            (Some(x), Some(y)) => Ok(Py::Float(x + y)),
            _ => Err(Raised),
        },
    }
}

/// `round(x, 3)`.
fn round3(value: Py) -> Py {
    match value {
        Py::Float(f) if f.is_finite() => Py::Float(format!("{f:.3}").parse().unwrap_or(f)),
        other => other,
    }
}
