//! `acl.check` (a Halite runner; Salt has none): what the master's access control decides
//! for a user running a function on a target, and which entry allows or why it denies —
//! without publishing anything.
//!
//! `halite-run acl.check fred 'web*' test.ping` → `{user, fun, tgt, tgt_type, minions,
//! allowed, error, reason}`, where `error` is the error Salt's CLI would print
//! (`AuthenticationError` / `AuthorizationError`) and `reason` names the ACL entry (or the
//! blacklist pattern) that decided.

use rmpv::Value;

use crate::error::RunnerError;
use crate::pyval::text;
use crate::registry::{Export, Invocation};
use crate::spec::{FunSpec, Param, ParamDefault};

pub(crate) const EXPORTS: &[Export] = &[("acl.check", check)];

/// The signatures of this module (not generated: Salt has no such runner).
pub(crate) static SPECS: &[FunSpec] = &[FunSpec {
    name: "acl.check",
    pyname: "check",
    params: &[
        Param {
            name: "user",
            default: None,
        },
        Param {
            name: "tgt",
            default: None,
        },
        Param {
            name: "fun",
            default: None,
        },
        Param {
            name: "arg",
            default: Some(ParamDefault::None),
        },
        Param {
            name: "tgt_type",
            default: Some(ParamDefault::Str("glob")),
        },
    ],
    varargs: false,
    kwargs: false,
    doc: r#"
    Explain what the master's access control (publisher_acl, publisher_acl_blacklist,
    sudo_acl) decides when ``user`` runs ``fun`` with ``arg`` on ``tgt``: whether it is
    allowed, the error the CLI would print, and the ACL entry or blacklist pattern that
    decided. Nothing is published.

    arg
        The job's arguments, as a list (``arg="[1, 'a=b']"``).

    CLI Example:

    .. code-block:: bash

        salt-run acl.check fred 'web*' test.ping
        salt-run acl.check dave 'G@os:RedHat' kmod.load arg="['nf_conntrack']" tgt_type=compound
    "#,
}];

fn check(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let user = text(inv.arg("user"))
        .ok_or_else(|| RunnerError::exception("SaltInvocationError", "user must be a string"))?;
    let tgt_type = text(inv.arg("tgt_type")).unwrap_or_else(|| "glob".into());
    let arg = match inv.arg("arg") {
        Value::Nil => Value::Array(vec![]),
        a @ Value::Array(_) => a.clone(),
        other => Value::Array(vec![other.clone()]),
    };
    Ok(inv
        .host
        .acl_check(&user, inv.arg("tgt"), &tgt_type, inv.arg("fun"), &arg))
}
