//! `master_bus` (a Halite returner; seed 002's idea): the job's return as an event on the
//! master's bus, under a tag a third-party script on the master subscribes to.
//!
//! ```text
//! halite '*' --return master_bus --return_kwargs '{"tag": "monitoring"}' cmd.run_all '...'
//! ```
//!
//! The tag is the option `tag` (`--return_kwargs '{"tag": ...}'`, or the minion config's
//! `master_bus.tag` / `master_bus: {tag: ...}`, or `alternative.master_bus.tag` with
//! `--return_config alternative`), default [`DEFAULT_TAG`]. The event's data is
//! [`FIELDS`] of the return. It goes the way `event.fire_master` goes: queued on the
//! minion's `fire_master` forwarding queue of every master it is connected to, kept
//! while a master is away and sent, in order, once it is back. A master fires it as it
//! fires every single-form minion event: `{"id": <minion, as authenticated>, "cmd":
//! "_minion_event", "pretag": null, "data": <these fields>, "tag": <tag>, ...}` under the
//! tag (Salt's tag blacklist for minion events applies, so `salt/job/*/new` and the like
//! are refused by the master).
//!
//! Stock minions get the same with `contrib/returners/master_bus.py`.

use crate::options::get_returner_options;
use crate::{Error, Host, Returner};
use halite_output::py_type_name;
use halite_proto::value::{self, s};
use halite_proto::Value;

/// The tag when none is configured.
pub const DEFAULT_TAG: &str = "salt/return/master_bus";

/// The fields of the return the event carries, in this order.
pub const FIELDS: [&str; 7] = [
    "id", "jid", "fun", "fun_args", "return", "retcode", "success",
];

pub(crate) const RETURNER: Returner = Returner {
    name: "master_bus",
    returner,
};

/// The event data for a return: [`FIELDS`], `None` for a missing one.
pub fn event_data(ret: &Value) -> Value {
    Value::Map(
        FIELDS
            .iter()
            .map(|f| (s(*f), value::get(ret, f).cloned().unwrap_or(Value::Nil)))
            .collect(),
    )
}

fn returner(host: &dyn Host, ret: &Value) -> Result<(), Error> {
    let opts = get_returner_options(
        host,
        "master_bus",
        ret,
        &["tag"],
        &[("tag", s(DEFAULT_TAG))],
    )?;
    let tag = match opts.get("tag") {
        Some(t) => value::str_of(t).ok_or_else(|| {
            Error::Options(format!(
                "master_bus tag must be a string, not {}",
                py_type_name(t)
            ))
        })?,
        None => DEFAULT_TAG,
    };
    host.fire_master(tag, event_data(ret))
        .map_err(Error::FireMaster)?;
    tracing::debug!(
        "master_bus: the return of job {} is queued for the master under tag {tag}",
        value::get(ret, "jid")
            .map(halite_output::py_str)
            .unwrap_or_default()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;
    use halite_proto::value::map;

    fn ret(kwargs: Option<Value>) -> Value {
        let mut r = map([
            ("success", Value::Boolean(false)),
            (
                "return",
                map([("retcode", Value::from(2)), ("stdout", s("ok"))]),
            ),
            ("retcode", Value::from(2)),
            ("jid", s("20260101000000000001")),
            ("fun", s("cmd.run_all")),
            ("fun_args", Value::Array(vec![s("echo ok; exit 2")])),
            ("user", s("root")),
        ]);
        if let Some(k) = kwargs {
            value::set(&mut r, "ret_kwargs", k);
        }
        value::set(&mut r, "id", s("m1"));
        r
    }

    #[test]
    fn the_return_is_fired_under_the_tag_of_ret_kwargs_with_the_seven_fields() {
        let host = FakeHost::with_opts(map([("master_bus.tag", s("from-config"))]));
        returner(&host, &ret(Some(map([("tag", s("monitoring"))])))).unwrap();
        let fired = host.fired();
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].0, "monitoring");
        assert_eq!(
            fired[0].1,
            map([
                ("id", s("m1")),
                ("jid", s("20260101000000000001")),
                ("fun", s("cmd.run_all")),
                ("fun_args", Value::Array(vec![s("echo ok; exit 2")])),
                (
                    "return",
                    map([("retcode", Value::from(2)), ("stdout", s("ok"))])
                ),
                ("retcode", Value::from(2)),
                ("success", Value::Boolean(false)),
            ])
        );
    }

    #[test]
    fn the_tag_comes_from_the_minion_config_else_the_default() {
        let host = FakeHost::with_opts(map([("master_bus", map([("tag", s("conf/tag"))]))]));
        returner(&host, &ret(None)).unwrap();
        assert_eq!(host.fired()[0].0, "conf/tag");
        let host = FakeHost::with_opts(map([("id", s("m1"))]));
        returner(&host, &ret(None)).unwrap();
        assert_eq!(host.fired()[0].0, DEFAULT_TAG);
    }

    #[test]
    fn a_tag_that_is_not_a_string_or_a_refused_queue_fails_the_returner() {
        let host = FakeHost::with_opts(map([("id", s("m1"))]));
        assert_eq!(
            returner(&host, &ret(Some(map([("tag", Value::from(5))])))),
            Err(Error::Options(
                "master_bus tag must be a string, not int".into()
            ))
        );
        let mut host = FakeHost::with_opts(map([("id", s("m1"))]));
        host.fire_error = Some("the tag is empty".into());
        assert_eq!(
            returner(&host, &ret(None)),
            Err(Error::FireMaster("the tag is empty".into()))
        );
        assert!(host.fired().is_empty());
    }
}
