//! The ACL table decided by stock Salt 3008.3 (`tools/gen_auth_table.py`): Halite must
//! give the recorded answer in both anchoring modes.

mod common;

use halite_acl::{Matching, Reason};

#[test]
fn halite_agrees_with_the_salt_table_in_both_modes() {
    let (fixture, cases) = common::load();
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        for (matching, want) in [(Matching::Full, case.full), (Matching::Prefix, case.prefix)] {
            let decision = common::decide(&fixture, case, matching);
            if decision.allowed != want {
                failures.push(format!(
                    "{} [{matching}]: want allowed={want}, got {decision}",
                    case.name
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn table_differences_from_salt_are_all_explained() {
    let (_, cases) = common::load();
    for case in &cases {
        if case.prefix != case.salt || case.full != case.salt {
            let note = case.note.as_deref().unwrap_or_default();
            assert!(
                note.starts_with("anchoring") || note.starts_with("deviation"),
                "{}: differs from Salt without a note",
                case.name
            );
        }
        if case.prefix != case.salt {
            assert!(
                case.note
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with("deviation"),
                "{}: prefix mode differs from Salt but is not marked as a deviation",
                case.name
            );
        }
    }
}

#[test]
fn table_covers_the_required_situations() {
    let (_, cases) = common::load();
    let has = |pred: &dyn Fn(&common::Case) -> bool| cases.iter().any(pred);
    assert!(has(&|c| c.kind == "peer"
        && c.id == "web.example.com.evil.org"
        && c.prefix
        && !c.full));
    assert!(has(&|c| c.fun.as_str() == Some("cmd.run_all")
        && c.prefix
        && !c.full));
    assert!(has(&|c| c.fun.as_str() == Some("testing.ping") && c.full));
    assert!(has(&|c| c.fun.is_array() && c.salt && !c.prefix));
    assert!(has(&|c| c.kind == "spec"));
    assert!(has(&|c| c.kind == "runner"));
    assert!(has(&|c| c
        .note
        .as_deref()
        .is_some_and(|n| n.starts_with("deviation"))));
    assert!(has(&|c| c.kind == "user"
        && c.user == "administrator"
        && c.prefix
        && !c.full));
    assert!(has(
        &|c| c.kind == "user" && c.salt_error.as_deref() == Some("UserAuthenticationError")
    ));
    assert!(has(&|c| c.kind == "user_runner" && c.salt));
    assert!(has(&|c| c.kind == "blacklist"
        && c.user == "sudo_bob"
        && c.salt));
    assert!(has(&|c| c.kind == "blacklist"
        && c.fun.is_array()
        && !c.salt));
}

#[test]
fn salt_syntax_errors_are_bad_syntax_decisions() {
    let (fixture, cases) = common::load();
    let errors: Vec<_> = cases
        .iter()
        .filter(|c| c.salt_error.as_deref() == Some("SaltInvocationError"))
        .collect();
    assert!(!errors.is_empty());
    for case in errors {
        let outcome = common::decide(&fixture, case, Matching::Full);
        assert_eq!(outcome.reason, Some(Reason::BadSyntax), "{}", case.name);
    }
}

#[test]
fn salt_user_authentication_failures_are_no_entries_decisions() {
    let (fixture, cases) = common::load();
    let mut seen = 0;
    for case in cases.iter().filter(|c| c.kind.starts_with("user")) {
        let salt_failed = case.salt_error.as_deref() == Some("UserAuthenticationError");
        seen += usize::from(salt_failed);
        for matching in [Matching::Full, Matching::Prefix] {
            let outcome = common::decide(&fixture, case, matching);
            let no_entries = matches!(outcome.reason, Some(Reason::NoEntriesForUser { .. }));
            // Full matching admits fewer user names; a deviation may deny earlier.
            let exact = matching == Matching::Prefix && case.note.is_none();
            if salt_failed || exact {
                assert_eq!(
                    no_entries, salt_failed,
                    "{} [{matching}]: {outcome}",
                    case.name
                );
            }
        }
    }
    assert!(
        seen >= 3,
        "only {seen} authentication failures in the table"
    );
}

#[test]
fn full_mode_never_allows_what_prefix_mode_denies() {
    let (fixture, cases) = common::load();
    for case in &cases {
        let full = common::decide(&fixture, case, Matching::Full).allowed;
        let prefix = common::decide(&fixture, case, Matching::Prefix).allowed;
        assert!(!full || prefix, "{}", case.name);
    }
}
