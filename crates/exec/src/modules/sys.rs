//! `salt/modules/sysmod.py` (`sys`): what the minion offers, and the docs.
//!
//! `sys.list_functions` and `sys.list_modules` list the native functions and, when the
//! registry has a fallback executor, the ones it offers (the union, as Salt's flat sorted
//! list). Halite extension: `sys.list_functions origin=True` tells them apart, as
//! `{"native": [...], "fallback": [...]}` (a function both offer is native: native
//! functions always win). `sys.doc` and `sys.argspec` know only the native functions.
//!
//! `sys.list_returners` and `sys.list_returner_functions` list Halite's returners
//! ([`halite_returners::names`]), each with its one function, `returner`; stock Salt
//! lists its ~40 returner modules and their master-side functions too.

use halite_pycall::strip_rst;
use rmpv::Value;

use crate::error::ExecError;
use crate::pyval::py_type_name;
use crate::registry::{Export, Invocation, Registry};

pub(crate) const EXPORTS: &[Export] = &[
    ("sys.argspec", argspec, None),
    ("sys.doc", doc, None),
    ("sys.list_functions", list_functions, None),
    ("sys.list_modules", list_modules, None),
    ("sys.list_returner_functions", list_returner_functions, None),
    ("sys.list_returners", list_returners, None),
    ("sys.reload_modules", reload_modules, None),
];

/// A module/function name argument, with the TypeError Python raises when code like
/// `"*" in module` or `module + "."` meets something else.
fn name_arg(v: &Value) -> Result<String, ExecError> {
    match v {
        Value::String(_) => Ok(crate::pyval::py_str(v)),
        Value::Array(_) => Err(ExecError::TypeError(
            "can only concatenate list (not \"str\") to list".to_owned(),
        )),
        Value::Map(_) => Err(ExecError::TypeError(
            "unsupported operand type(s) for +: 'dict' and 'str'".to_owned(),
        )),
        other => Err(ExecError::TypeError(format!(
            "argument of type '{}' is not iterable",
            py_type_name(other)
        ))),
    }
}

fn names_arg(args: &[Value]) -> Result<Vec<String>, ExecError> {
    args.iter().map(name_arg).collect()
}

/// `sys.doc(*names)` over the registry: `{fun: stripped docstring}`.
pub(crate) fn docs_for(registry: &Registry, names: &[String]) -> Value {
    let all = registry.names();
    let selected: Vec<&String> = if names.is_empty() {
        all.iter().collect()
    } else {
        let mut picked: Vec<&String> = Vec::new();
        for module in names {
            for fun in &all {
                let hit = if module.contains('*') {
                    halite_target::fnmatch::fnmatch(fun, module)
                } else if module.is_empty() {
                    true
                } else {
                    let target = if module.ends_with('.') {
                        module.clone()
                    } else {
                        format!("{module}.")
                    };
                    fun == module || fun.starts_with(&target)
                };
                if hit && !picked.contains(&fun) {
                    picked.push(fun);
                }
            }
        }
        picked
    };
    Value::Map(
        selected
            .into_iter()
            .map(|fun| {
                let doc = registry
                    .doc(fun)
                    .map_or(Value::Nil, |d| Value::from(strip_rst(d)));
                (Value::from(fun.as_str()), doc)
            })
            .collect(),
    )
}

fn doc(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let names = names_arg(&inv.call.varargs)?;
    Ok(docs_for(inv.registry, &names))
}

/// The functions of `all` that `sys.list_functions(*names)` picks, sorted.
fn pick_functions(all: Vec<String>, names: &[String]) -> Vec<String> {
    let mut picked: Vec<String> = if names.is_empty() {
        all
    } else {
        all.into_iter()
            .filter(|fun| {
                names.iter().any(|module| {
                    if module.contains('*') || module.contains('.') {
                        halite_target::fnmatch::fnmatch(fun, module)
                    } else {
                        fun.starts_with(&format!("{module}."))
                    }
                })
            })
            .collect()
    };
    picked.sort();
    picked.dedup();
    picked
}

/// The fallback's functions that are not native (those are run natively).
fn fallback_only(registry: &Registry) -> Vec<String> {
    let mut names = registry.fallback_names();
    names.retain(|fun| !registry.has(fun));
    names
}

fn strings(names: Vec<String>) -> Value {
    Value::Array(names.into_iter().map(Value::from).collect())
}

fn list_functions(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let names = names_arg(&inv.call.varargs)?;
    let native = inv.registry.names();
    let fallback = fallback_only(inv.registry);
    if inv.call.kwarg("origin").is_some_and(crate::pyval::truthy) {
        return Ok(Value::Map(vec![
            (
                Value::from("native"),
                strings(pick_functions(native, &names)),
            ),
            (
                Value::from("fallback"),
                strings(pick_functions(fallback, &names)),
            ),
        ]));
    }
    let mut all = native;
    all.extend(fallback);
    Ok(strings(pick_functions(all, &names)))
}

fn list_modules(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let names = names_arg(&inv.call.varargs)?;
    let mut modules: Vec<String> = Vec::new();
    let mut all = inv.registry.names();
    all.extend(fallback_only(inv.registry));
    for fun in all {
        let module = fun.split('.').next().unwrap_or_default().to_owned();
        let hit = names.is_empty()
            || names.iter().any(|pattern| {
                if pattern.contains('*') {
                    halite_target::fnmatch::fnmatch(&fun, pattern)
                } else {
                    module == *pattern
                }
            });
        if hit && !modules.contains(&module) {
            modules.push(module);
        }
    }
    modules.sort();
    Ok(Value::Array(modules.into_iter().map(Value::from).collect()))
}

/// `sys.list_returners(*args)`: the returner names, sorted; with arguments, those named
/// or (with a `*`) whose functions match the glob.
fn list_returners(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let names = halite_returners::names();
    if inv.call.varargs.is_empty() {
        return Ok(Value::Array(names.into_iter().map(Value::from).collect()));
    }
    let mut picked: Vec<&str> = Vec::new();
    for module in &inv.call.varargs {
        // `"*" in module`, then `mod_test == module`: a list or dict matches nothing.
        let module = match module {
            Value::String(_) => crate::pyval::py_str(module),
            Value::Array(_) | Value::Map(_) => continue,
            Value::Binary(_) => {
                return Err(ExecError::TypeError(
                    "a bytes-like object is required, not 'str'".to_owned(),
                ))
            }
            other => {
                return Err(ExecError::TypeError(format!(
                    "argument of type '{}' is not iterable",
                    py_type_name(other)
                )))
            }
        };
        for name in &names {
            let hit = if module.contains('*') {
                // `fnmatch.filter` over the returners' function names.
                halite_target::fnmatch::fnmatch(&format!("{name}.returner"), &module)
            } else {
                *name == module
            };
            if hit && !picked.contains(name) {
                picked.push(name);
            }
        }
    }
    picked.sort_unstable();
    Ok(Value::Array(picked.into_iter().map(Value::from).collect()))
}

/// `sys.list_returner_functions(*args, **kwargs)`: `<returner>.returner` for every
/// returner, or those of the named returners, or those matching a glob (an argument with
/// `*` or `.`).
fn list_returner_functions(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let names = names_arg(&inv.call.varargs)?;
    let all = halite_returners::functions();
    let mut picked: Vec<String> = if names.is_empty() {
        all
    } else {
        all.into_iter()
            .filter(|fun| {
                names.iter().any(|module| {
                    if module.contains('*') || module.contains('.') {
                        halite_target::fnmatch::fnmatch(fun, module)
                    } else {
                        fun.starts_with(&format!("{module}."))
                    }
                })
            })
            .collect()
    };
    picked.sort();
    Ok(Value::Array(picked.into_iter().map(Value::from).collect()))
}

fn reload_modules(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::Boolean(true))
}

/// `salt.utils.args.argspec_report`.
fn argspec(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let module = name_arg(inv.arg("module"))?;
    let glob = module.contains('*') || module.contains('.');
    let prefix = format!("{module}.");
    let mut out = Vec::new();
    for spec in inv.registry.specs() {
        let hit = if glob {
            halite_target::fnmatch::fnmatch(spec.name, &module)
        } else {
            spec.name.starts_with(&prefix)
        };
        if !hit {
            continue;
        }
        let args: Vec<Value> = spec.params.iter().map(|p| Value::from(p.name)).collect();
        let defaults: Vec<Value> = spec
            .params
            .iter()
            .filter_map(|p| p.default.map(|d| d.value()))
            .collect();
        let or_none = |items: Vec<Value>| {
            if items.is_empty() {
                Value::Nil
            } else {
                Value::Array(items)
            }
        };
        let flag = |b: bool| if b { Value::Boolean(true) } else { Value::Nil };
        out.push((
            Value::from(spec.name),
            Value::Map(vec![
                (Value::from("args"), or_none(args)),
                (Value::from("defaults"), or_none(defaults)),
                (Value::from("varargs"), flag(spec.varargs)),
                (Value::from("kwargs"), flag(spec.kwargs)),
            ]),
        ));
    }
    Ok(Value::Map(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, Fallback, JobReturn};
    use std::sync::Arc;

    /// A fallback offering `state.apply`, `pkg.list_pkgs` and (shadowed) `test.ping`.
    struct Listed;

    impl Fallback for Listed {
        fn run(&self, _: &Context, fun: &str, _: &Value) -> JobReturn {
            JobReturn {
                ret: Value::from(format!("ran {fun}")),
                retcode: 0,
                success: true,
                out: None,
                multi: None,
            }
        }

        fn functions(&self) -> Vec<String> {
            ["pkg.list_pkgs", "state.apply", "test.ping"]
                .map(str::to_owned)
                .to_vec()
        }
    }

    fn run_sys(registry: &Registry, fun: &str, arg: Vec<Value>) -> Value {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = halite_config::MinionConfig::from_yaml_str(
            &format!("id: t\nroot_dir: {}\n", dir.path().display()),
            &dir.path().join("minion"),
        )
        .expect("config");
        let ctx = Context {
            id: "t".to_owned(),
            opts: Arc::new(opts),
            grains: Arc::new(Value::Map(Vec::new())),
            pillar: Arc::new(Value::Map(Vec::new())),
            jid: None,
            pub_data: None,
            jobs: Arc::new(crate::NoJobs),
            job: crate::JobHandle::new(),
            master: None,
        };
        registry
            .execute(&ctx, &Value::from(fun), &Value::Array(arg))
            .ret
    }

    #[test]
    fn list_functions_is_the_flat_sorted_union_with_the_fallback() {
        let registry = Registry::builtin().with_fallback(Arc::new(Listed));
        let Value::Array(all) = run_sys(&registry, "sys.list_functions", vec![]) else {
            panic!("not a list")
        };
        let all: Vec<String> = all.iter().map(crate::pyval::py_str).collect();
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(all, sorted, "sorted, each once");
        for fun in [
            "state.apply",
            "pkg.list_pkgs",
            "test.ping",
            "sys.list_functions",
        ] {
            assert!(all.contains(&fun.to_owned()), "{fun} missing");
        }
        let picked = run_sys(&registry, "sys.list_functions", vec![Value::from("state")]);
        assert_eq!(picked, Value::Array(vec![Value::from("state.apply")]));
        let modules = run_sys(&registry, "sys.list_modules", vec![]);
        let Value::Array(modules) = modules else {
            panic!("not a list")
        };
        assert!(modules.contains(&Value::from("pkg")) && modules.contains(&Value::from("sys")));
    }

    #[test]
    fn list_functions_with_origin_marks_native_and_fallback_and_native_wins() {
        let registry = Registry::builtin().with_fallback(Arc::new(Listed));
        let marked = run_sys(
            &registry,
            "sys.list_functions",
            vec![
                Value::from("test.ping"),
                Value::from("state.*"),
                Value::from("origin=True"),
            ],
        );
        assert_eq!(
            marked,
            Value::Map(vec![
                (
                    Value::from("native"),
                    Value::Array(vec![Value::from("test.ping")])
                ),
                (
                    Value::from("fallback"),
                    Value::Array(vec![Value::from("state.apply")])
                ),
            ])
        );
        // The native test.ping runs, not the fallback's.
        assert_eq!(
            run_sys(&registry, "test.ping", vec![]),
            Value::Boolean(true)
        );
        assert_eq!(
            run_sys(&registry, "state.apply", vec![]),
            Value::from("ran state.apply")
        );
    }

    #[test]
    fn doc_prefix_does_not_match_longer_module_names() {
        let registry = Registry::builtin();
        let docs = docs_for(&registry, &["sys".to_owned()]);
        let Value::Map(entries) = docs else {
            panic!("docs are a map")
        };
        assert!(entries
            .iter()
            .all(|(k, _)| crate::pyval::py_str(k).starts_with("sys.")));
        assert!(!entries.is_empty());
    }
}
