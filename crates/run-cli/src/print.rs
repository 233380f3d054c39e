//! How `salt-run` shows a run and picks its exit status: `AsyncClientMixin.print_async_event`
//! for each event of the run, `display_output` for everything else, and the `retcode`
//! rules of `salt/cli/run.py`.

use halite_output::{OutputArgs, OutputOptions, Outputter};
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::io::Write;

/// Prints values as `salt.output.display_output` does, with the command line's output flags.
pub struct Printer {
    cli_out: Option<String>,
    opts: OutputOptions,
    quiet: bool,
}

impl Printer {
    /// A printer for these flags; `quiet` (`--quiet`, or `--out quiet`) prints nothing.
    pub fn new(output: &OutputArgs, quiet: bool) -> Printer {
        Printer {
            cli_out: output.out.clone(),
            opts: output.options(),
            quiet: quiet || output.quiet(),
        }
    }

    /// Whether this printer prints nothing.
    pub fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// `display_output(data, outputter, opts)`: `--out` wins unless it is `highstate`,
    /// then the outputter asked for, then `nested`.
    pub fn print(&self, data: &Value, outputter: Option<&str>) {
        if self.quiet {
            return;
        }
        let name = halite_output::outputter_name(self.cli_out.as_deref(), outputter, false, "");
        let out = Outputter::from_name(&name).unwrap_or_else(|e| {
            tracing::error!("{e}");
            Outputter::Nested
        });
        let text = halite_output::render(out, data, &self.opts);
        let mut stdout = std::io::stdout().lock();
        // Salt's print_cli ignores a closed pipe.
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }

    /// `print_async_event(suffix, event)` for one event of the run.
    pub fn print_event(&self, suffix: &str, event: &Value) {
        if let Some(shown) = shown(suffix, event) {
            self.print(&shown.data, shown.outputter.as_deref());
        }
    }
}

/// What `print_async_event` displays for one event, and the outputter it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    /// The value printed.
    pub data: Value,
    /// The outputter named by the event or the return, if any.
    pub outputter: Option<String>,
}

/// `print_async_event(suffix, event)`: nothing for `new`; for `ret`, the return (or `D` of
/// a return that is exactly `{"data": D, "outputter": X}`, printed with `X`); for any
/// other suffix, `{"suffix": suffix, "event": event}`. The outputter otherwise comes from
/// the event's own `outputter`, else the return's `outputter` when the return is a map.
pub fn shown(suffix: &str, event: &Value) -> Option<Shown> {
    if suffix == "new" {
        return None;
    }
    let ret = value::get(event, "return");
    let named = |v: &Value| match v {
        Value::Nil => None,
        other => {
            Some(value::str_of(other).map_or_else(|| halite_output::py_str(other), str::to_owned))
        }
    };
    // `event.get("outputter") or event.get("return").get("outputter")`; the AttributeError
    // of a return that is not a dict means no outputter.
    let mut outputter = match value::get(event, "outputter").filter(|o| value::truthy(o)) {
        Some(o) => named(o),
        None => match ret {
            Some(r @ Value::Map(_)) => value::get(r, "outputter").and_then(named),
            _ => None,
        },
    };
    if suffix != "ret" {
        return Some(Shown {
            data: Value::Map(vec![(s("suffix"), s(suffix)), (s("event"), event.clone())]),
            outputter,
        });
    }
    let data = match ret {
        Some(Value::Map(entries)) if is_data_and_outputter(entries) => {
            outputter = value::get(ret?, "outputter").and_then(named);
            value::get(ret?, "data").cloned().unwrap_or(Value::Nil)
        }
        Some(r) => r.clone(),
        None => Value::Nil,
    };
    Some(Shown { data, outputter })
}

/// `set(ret) == {"data", "outputter"}`.
fn is_data_and_outputter(entries: &[(Value, Value)]) -> bool {
    entries.len() == 2
        && ["data", "outputter"]
            .iter()
            .all(|k| entries.iter().any(|(key, _)| value::str_of(key) == Some(k)))
}

/// The exit of `salt-run` once a run has returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// The process exit status.
    pub code: u8,
    /// What Python's `sys.exit(obj)` writes to stderr for a status that is not an integer.
    pub message: Option<String>,
}

/// `salt/cli/run.py` on what `Runner.run` returned: the full return (the `ret` event's
/// data) for `salt-run`, what was printed ([`eauth_shown`]'s data) for `salt-run -a`. Its
/// `retcode` if it has one, else (a map with `return` standing for that return) the
/// `retcode` of the return when that is a map, else of the return's `data` map; no
/// `retcode` anywhere exits 0 (`success: false` alone does not change the exit status).
/// The status is Python's `sys.exit`: an integer modulo 256, `None` 0, a boolean 0 or 1,
/// anything else 1 after printing it.
pub fn exit_status(full: &Value) -> Exit {
    let has = |v: &Value| matches!(v, Value::Map(_)) && value::get(v, "retcode").is_some();
    let mut ret = full;
    if !has(full) {
        if let Some(r) = value::get(full, "return") {
            ret = r;
        }
    }
    let code = if has(ret) {
        value::get(ret, "retcode")
    } else {
        value::get(ret, "data")
            .filter(|d| has(d))
            .and_then(|d| value::get(d, "retcode"))
    };
    match code {
        None | Some(Value::Nil) => Exit {
            code: 0,
            message: None,
        },
        Some(Value::Boolean(b)) => Exit {
            code: u8::from(*b),
            message: None,
        },
        Some(Value::Integer(i)) => Exit {
            // Linux keeps the low byte of the status; -1 is 255.
            code: i
                .as_i64()
                .map(|v| v.rem_euclid(256))
                .or_else(|| i.as_u64().map(|v| (v % 256) as i64))
                .and_then(|v| u8::try_from(v).ok())
                .unwrap_or(1),
            message: None,
        },
        Some(other) => Exit {
            code: 1,
            message: Some(halite_output::py_str(other)),
        },
    }
}

/// What `salt-run -a` shows of a run (`Runner.run` with `cmd_sync`): the `ret` event's
/// `return` alone, or `D` printed with `X` when the return is exactly
/// `{"data": D, "outputter": X}`; no other outputter is looked for, and the exit status
/// is [`exit_status`] of what is shown (the run's own `retcode` is not looked at).
pub fn eauth_shown(event: &Value) -> Shown {
    match value::get(event, "return") {
        Some(ret @ Value::Map(entries)) if is_data_and_outputter(entries) => Shown {
            data: value::get(ret, "data").cloned().unwrap_or(Value::Nil),
            outputter: value::get(ret, "outputter").and_then(|o| match o {
                Value::Nil => None,
                other => Some(
                    value::str_of(other)
                        .map_or_else(|| halite_output::py_str(other), str::to_owned),
                ),
            }),
        },
        Some(ret) => Shown {
            data: ret.clone(),
            outputter: None,
        },
        None => Shown {
            data: Value::Nil,
            outputter: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn ret_event(ret: Value) -> Value {
        map([
            ("fun", s("runner.jobs.lookup_jid")),
            ("jid", s("1")),
            ("return", ret),
            ("success", Value::from(true)),
        ])
    }

    #[test]
    fn new_events_are_not_shown_and_ret_shows_the_return() {
        assert_eq!(shown("new", &map([("fun", s("x"))])), None);
        assert_eq!(
            shown("ret", &ret_event(Value::Array(vec![s("m1")]))),
            Some(Shown {
                data: Value::Array(vec![s("m1")]),
                outputter: None
            })
        );
        assert_eq!(
            shown("ret", &map([("fun", s("x"))])),
            Some(Shown {
                data: Value::Nil,
                outputter: None
            })
        );
    }

    #[test]
    fn a_return_of_data_and_outputter_prints_data_with_that_outputter() {
        let ret = map([("outputter", s("json")), ("data", map([("m1", s("x"))]))]);
        assert_eq!(
            shown("ret", &ret_event(ret)),
            Some(Shown {
                data: map([("m1", s("x"))]),
                outputter: Some("json".into())
            })
        );
        // With a third key the whole return is printed, still with its outputter.
        let ret = map([
            ("outputter", s("yaml")),
            ("data", Value::from(1)),
            ("retcode", Value::from(2)),
        ]);
        assert_eq!(
            shown("ret", &ret_event(ret.clone())),
            Some(Shown {
                data: ret,
                outputter: Some("yaml".into())
            })
        );
    }

    #[test]
    fn the_events_own_outputter_comes_first() {
        let mut ev = ret_event(map([("outputter", s("yaml")), ("x", Value::from(1))]));
        value::set(&mut ev, "outputter", s("txt"));
        assert_eq!(shown("ret", &ev).unwrap().outputter.as_deref(), Some("txt"));
        // A falsy event outputter falls through to the return's.
        value::set(&mut ev, "outputter", s(""));
        assert_eq!(
            shown("ret", &ev).unwrap().outputter.as_deref(),
            Some("yaml")
        );
    }

    #[test]
    fn other_events_show_their_suffix_and_data() {
        let ev = map([("message", s("Querying job 1")), ("_stamp", s("t"))]);
        assert_eq!(
            shown("progress", &ev),
            Some(Shown {
                data: map([("suffix", s("progress")), ("event", ev.clone())]),
                outputter: None
            })
        );
    }

    #[test]
    fn exit_status_follows_salt_cli_run() {
        let code = |v: Value| exit_status(&v).code;
        assert_eq!(code(ret_event(Value::Array(vec![]))), 0);
        // success false alone exits 0.
        let mut failed = ret_event(s("Exception occurred in runner x: ..."));
        value::set(&mut failed, "success", Value::from(false));
        assert_eq!(code(failed.clone()), 0);
        // The run's own retcode (a raised exception, or a refused call).
        value::set(&mut failed, "retcode", Value::from(1));
        assert_eq!(code(failed.clone()), 1);
        value::set(&mut failed, "retcode", Value::from(254));
        assert_eq!(code(failed), 254);
        // The return's retcode, then the return's data's retcode.
        assert_eq!(code(ret_event(map([("retcode", Value::from(2))]))), 2);
        assert_eq!(
            code(ret_event(map([(
                "data",
                map([("retcode", Value::from(3))])
            )]))),
            3
        );
        assert_eq!(code(ret_event(map([("data", s("has retcode in it"))]))), 0);
        // sys.exit semantics.
        assert_eq!(code(ret_event(map([("retcode", Value::from(-1))]))), 255);
        assert_eq!(code(ret_event(map([("retcode", Value::from(256))]))), 0);
        assert_eq!(
            code(ret_event(map([("retcode", Value::from(u64::MAX))]))),
            255
        );
        assert_eq!(code(ret_event(map([("retcode", Value::from(true))]))), 1);
        assert_eq!(code(ret_event(map([("retcode", Value::Nil)]))), 0);
        assert_eq!(
            exit_status(&ret_event(map([("retcode", s("bad"))]))),
            Exit {
                code: 1,
                message: Some("bad".into())
            }
        );
    }

    #[test]
    fn eauth_runs_show_the_return_alone_and_exit_by_it() {
        // The event's own outputter and the return's are not used, nor its retcode.
        let mut ev = ret_event(map([("outputter", s("yaml")), ("x", Value::from(1))]));
        value::set(&mut ev, "outputter", s("txt"));
        value::set(&mut ev, "retcode", Value::from(5));
        let shown = eauth_shown(&ev);
        assert_eq!(shown.outputter, None);
        assert_eq!(
            shown.data,
            map([("outputter", s("yaml")), ("x", Value::from(1))])
        );
        assert_eq!(exit_status(&shown.data).code, 0);
        // {"data", "outputter"} is unwrapped, and the exit status read from the data.
        let ret = map([
            ("outputter", s("json")),
            ("data", map([("retcode", Value::from(3))])),
        ]);
        let shown = eauth_shown(&ret_event(ret));
        assert_eq!(shown.outputter.as_deref(), Some("json"));
        assert_eq!(shown.data, map([("retcode", Value::from(3))]));
        assert_eq!(exit_status(&shown.data).code, 3);
        // A return holding `return` and no retcode stands for that return.
        let nested = map([("return", map([("retcode", Value::from(2))]))]);
        assert_eq!(exit_status(&nested).code, 2);
        assert_eq!(
            exit_status(&map([("data", map([("retcode", Value::from(4))]))])).code,
            4
        );
        assert_eq!(exit_status(&Value::Array(vec![s("m1")])).code, 0);
        assert_eq!(eauth_shown(&Value::Nil).data, Value::Nil);
    }

    #[test]
    fn odd_events_never_panic() {
        for ev in [
            Value::Nil,
            s("text"),
            Value::Array(vec![Value::Nil]),
            map([("return", Value::Nil), ("outputter", Value::from(5))]),
            map([(
                "return",
                map([("data", Value::Nil), ("outputter", Value::Nil)]),
            )]),
            map([("retcode", Value::F64(1.5))]),
        ] {
            let _ = shown("ret", &ev);
            let _ = shown("progress", &ev);
            let _ = exit_status(&ev);
            let _ = exit_status(&eauth_shown(&ev).data);
        }
        let ev = map([("return", Value::Nil), ("outputter", Value::from(5))]);
        assert_eq!(shown("ret", &ev).unwrap().outputter.as_deref(), Some("5"));
        assert_eq!(
            exit_status(&map([("retcode", Value::F64(1.5))]))
                .message
                .as_deref(),
            Some("1.5")
        );
    }
}
