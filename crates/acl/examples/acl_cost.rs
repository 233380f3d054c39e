//! The cost of the `publisher_acl` check per publish, at 10,000 accepted minions with a
//! 50-entry ACL (the figures of BENCHMARKS.md, "Access control").
//!
//! ```text
//! cargo run --release --example acl_cost -p halite-acl -- [--minions N] [--seconds S]
//!                                                          [--user NAME] [--only TEXT]
//!                                                          [--jsonl FILE]
//! cargo run --release --example acl_cost -p halite-acl -- --print-acl [--user NAME]
//! cargo run --release --example acl_cost -p halite-acl -- --print-cases
//! ```
//!
//! What it measures: [`UserAcl::check`] for one non-root user, with the request's target
//! already expanded (`Request.minions`, as the master passes it) and the ACL's target
//! entries evaluated through [`halite_target::CkMinions`] and a grains cache (the
//! implementation of [`Targets`] the master's `AclTargets` wraps: an entry's target is
//! evaluated over the request's minions only, `check_among(tgt, "compound", ":", greedy,
//! requested)`). Beside it, for each case:
//! - `master step`: what `publish_verdict` in `crates/master/src/access.rs` does around
//!   the check on every publish by an ACL user: borrow the expected minions, check, and
//!   format the decision (`Decision::to_string`);
//! - `expand request`: the request target's `check_minions`, which every publish does
//!   whether or not an ACL applies (not part of the ACL's cost; shown for scale);
//! - `evaluations`: how many times the check called [`Targets::first_outside`], and on how
//!   many minions in all.
//!
//! Before timing, each case is also decided with every entry's target expanded over all
//! accepted minions (the check as it was before it evaluated entries over the request);
//! the run fails if the two decisions differ.
//!
//! The fleet: `N` ids in four groups, `web` 40 %, `db` 20 %, `app` 20 %, `log` 20 %
//! (`web0000`…), with grains (`os`, `role`, `env`, `roles`) for every minion except the
//! second half of the `log` group (never sent its grains). The ACL (`--print-acl` prints
//! it as `{user: [entries]}` JSON, which `bench/acl.sh` puts in both masters' config):
//! 5 string entries and 45 target entries (glob, grain, compound, list, PCRE, one `*`),
//! 42 of which allow `test.ping` among other functions (as team blocks do) and 3 of which
//! have `args`/`kwargs` rules; the last is the entry for the `log` group.
//!
//! Each case runs for `--seconds` (default 1) after a warm-up, at least 50 and at most
//! 200,000 checks; the table gives the median and the 99th percentile per check in µs and
//! whether the goal (< 1 ms per check, median and p99) is met. Single-threaded; the
//! machine's other load shows in p99. `--only TEXT` runs the cases whose name contains
//! TEXT (to profile one under `perf record`); `--jsonl FILE` appends one JSON record per
//! case to FILE; `--print-cases` prints the cases as JSON (`bench/acl.sh` times stock
//! Salt's `auth_check` on them).

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use halite_acl::{Decision, GrantedBy, Matching, Reason, Request, Targets, UserAcl, Value};
use halite_target::{Bank, CkMinions, MinionDataCache, RegexCache};

/// The goal: one check under 1 ms.
const GOAL: Duration = Duration::from_millis(1);
/// Fewest and most timed checks per case.
const MIN_ITERS: usize = 50;
const MAX_ITERS: usize = 200_000;
/// Untimed checks before each case.
const WARM_UP: usize = 10;

/// The ACL of one user: 50 entries, in the order an administrator might write them.
/// Entry numbers (0-based) are in the comments of the cases below.
const ACL: &str = r#"[
  "test.version",
  "grains.items",
  "grains.get",
  "sys.doc",
  {"web*": ["test.ping", "pkg.version", "service.status"]},
  {"db*": ["test.ping", "mysql.status", "mysql.db_list"]},
  {"app*": ["test.ping", "service.status", "state.show_sls"]},
  {"G@os:Debian": ["pkg.list_upgrades", "apt.*"]},
  {"G@os:CentOS": ["pkg.list_upgrades", "yum.*"]},
  {"G@role:web and G@env:prod": ["test.ping", "nginx.*"]},
  {"G@role:web and G@env:dev": ["test.ping", "nginx.*", "service.restart"]},
  {"G@role:db and G@env:prod": ["test.ping", "mysql.*"]},
  {"G@role:db and G@env:dev": ["test.ping", "mysql.*", "service.restart"]},
  {"G@role:app and G@env:prod": ["test.ping", "supervisord.status"]},
  {"G@role:app and G@env:dev": ["test.ping", "supervisord.*"]},
  {"G@roles:cache": ["test.ping", "redis.*", "memcached.*"]},
  {"G@roles:monitoring": ["test.ping", "nagios.*"]},
  {"web0* or web1*": ["test.ping", "disk.usage"]},
  {"web2* or web3*": ["test.ping", "disk.usage"]},
  {"db0* or db1*": ["test.ping", "disk.usage"]},
  {"app0* or app1*": ["test.ping", "disk.usage"]},
  {"E@web0[0-4][0-9]{2}": ["test.ping", "network.ping"]},
  {"E@web[1-3][0-9]{3}": ["test.ping", "network.ping"]},
  {"E@db[01][0-9]{3}": ["test.ping", "network.ping"]},
  {"E@app[01][0-9]{3}": ["test.ping", "network.ping"]},
  {"L@web0000,web0001,web0002,db0000,db0001": ["test.ping", "cp.*"]},
  {"L@app0000,app0001,app0002": ["test.ping", "cp.*"]},
  {"web* and not G@env:prod": [{"cmd.run": {"args": ["systemctl status [a-z-]+"]}}, "test.ping"]},
  {"db* and G@env:dev": [{"cmd.run": {"args": ["mysqladmin (status|processlist)"]}}, "test.ping"]},
  {"app* and G@env:dev": [{"state.apply": {"args": ["app\\.[a-z]+"], "kwargs": {"test": "True"}}}, "test.ping"]},
  {"web* and G@os:Debian": ["test.ping", "pkg.upgrade"]},
  {"web* and G@os:CentOS": ["test.ping", "pkg.upgrade"]},
  {"db* and G@os:Debian": ["test.ping", "pkg.upgrade"]},
  {"db* and G@os:CentOS": ["test.ping", "pkg.upgrade"]},
  {"app* and G@os:Debian": ["test.ping", "pkg.upgrade"]},
  {"app* and G@os:CentOS": ["test.ping", "pkg.upgrade"]},
  {"web*0": ["test.ping", "status.procs"]},
  {"web*5": ["test.ping", "status.procs"]},
  {"db*0": ["test.ping", "status.procs"]},
  {"db*5": ["test.ping", "status.procs"]},
  {"app*0": ["test.ping", "status.procs"]},
  {"app*5": ["test.ping", "status.procs"]},
  {"G@env:prod and not G@roles:cache": ["test.ping", "status.diskusage"]},
  {"G@env:dev and not G@roles:cache": ["test.ping", "status.diskusage"]},
  {"web00*": ["test.*", "saltutil.sync_all"]},
  {"db00*": ["test.*", "saltutil.sync_all"]},
  {"app00*": ["test.*", "saltutil.sync_all"]},
  {"*": ["status.uptime", "status.loadavg"]},
  "state.show_top",
  {"log*": ["test.ping", "logrotate.*", "file.tail"]}
]"#;

/// One publish to time.
struct Case {
    name: &'static str,
    fun: &'static str,
    arg: &'static [&'static str],
    tgt: &'static str,
    tgt_type: &'static str,
}

impl Case {
    fn arg_value(&self) -> Value {
        Value::Array(self.arg.iter().map(|a| Value::from(*a)).collect())
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "fun": self.fun,
            "arg": self.arg,
            "tgt": self.tgt,
            "tgt_type": self.tgt_type,
        })
    }
}

fn cases() -> Vec<Case> {
    let case = |name, fun, arg, tgt, tgt_type| Case {
        name,
        fun,
        arg,
        tgt,
        tgt_type,
    };
    vec![
        // Entry 0: a string entry, no expansion.
        case("early string entry", "test.version", &[], "*", "glob"),
        // Entry 4: `web*` is expanded once.
        case("early glob entry", "test.ping", &[], "web*", "glob"),
        // Entry 49, after the 41 earlier target entries allowing test.ping were expanded.
        case("late entry", "test.ping", &[], "log*", "glob"),
        // No entry covers every minion: all 42 entries allowing test.ping are expanded.
        case("denied, all scanned", "test.ping", &[], "*", "glob"),
        // Entry 47 `*`: no expansion.
        case("`*` entry", "status.uptime", &[], "*", "glob"),
        // Entry 27, an args rule, on a compound request target.
        case(
            "args rule, compound target",
            "cmd.run",
            &["systemctl status nginx"],
            "web* and G@env:dev",
            "compound",
        ),
        // Entry 27 covers web0004 (env dev) but its args rule refuses: denied.
        case(
            "args rule refuses",
            "cmd.run",
            &["rm -rf /"],
            "web0004",
            "glob",
        ),
    ]
}

/// The master's grains cache (`crates/master/src/lib.rs`, `GrainsCache`): grains in
/// memory, an empty pillar for everyone.
struct Grains(HashMap<String, Value>);

impl MinionDataCache for Grains {
    fn has_grains(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }

    fn fetch(&self, bank: Bank, id: &str) -> Option<Cow<'_, Value>> {
        match bank {
            Bank::Grains => self.0.get(id).map(Cow::Borrowed),
            Bank::Pillar => Some(Cow::Owned(Value::Map(vec![]))),
        }
    }
}

/// [`CkMinions`] as the ACL sees it, counting the entry target evaluations and the
/// minions they covered.
struct Counting<'a> {
    ck: CkMinions<'a>,
    calls: Cell<usize>,
    minions: Cell<usize>,
}

impl Targets for Counting<'_> {
    fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String> {
        self.ck.expand(tgt, tgt_type)
    }

    fn first_outside<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        candidates: &'c [String],
    ) -> Option<&'c str> {
        self.calls.set(self.calls.get() + 1);
        self.minions.set(self.minions.get() + candidates.len());
        self.ck.first_outside(tgt, tgt_type, candidates)
    }
}

/// [`CkMinions`] answering `first_outside` from the target's expansion over every
/// accepted minion: the reference the decisions are compared with.
struct ExpandAll<'a>(CkMinions<'a>);

impl Targets for ExpandAll<'_> {
    fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String> {
        self.0.expand(tgt, tgt_type)
    }

    fn first_outside<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        candidates: &'c [String],
    ) -> Option<&'c str> {
        let all: HashSet<String> = self.0.expand(tgt, tgt_type).into_iter().collect();
        candidates
            .iter()
            .map(String::as_str)
            .find(|id| !all.contains(*id))
    }
}

/// `n` accepted ids and the grains of all but the second half of the `log` group.
fn fleet(n: usize) -> (BTreeSet<String>, Grains) {
    let groups = [("web", 40), ("db", 20), ("app", 20), ("log", 20)];
    let width = n.saturating_sub(1).to_string().len().max(4);
    let mut ids = BTreeSet::new();
    let mut grains = HashMap::new();
    let mut placed = 0;
    for (g, (prefix, percent)) in groups.iter().enumerate() {
        let count = if g + 1 == groups.len() {
            n - placed
        } else {
            n * percent / 100
        };
        placed += count;
        for i in 0..count {
            let id = format!("{prefix}{i:0width$}");
            if *prefix == "log" && i >= count / 2 {
                ids.insert(id);
                continue;
            }
            let os = if i % 3 == 0 { "CentOS" } else { "Debian" };
            let env = if i % 4 == 0 { "dev" } else { "prod" };
            let mut roles = vec![Value::from(*prefix)];
            if i % 10 == 0 {
                roles.push(Value::from("cache"));
            }
            if i % 25 == 0 {
                roles.push(Value::from("monitoring"));
            }
            let g = Value::Map(vec![
                (Value::from("id"), Value::from(id.as_str())),
                (Value::from("os"), Value::from(os)),
                (Value::from("role"), Value::from(*prefix)),
                (Value::from("env"), Value::from(env)),
                (Value::from("roles"), Value::Array(roles)),
            ]);
            grains.insert(id.clone(), g);
            ids.insert(id);
        }
    }
    (ids, Grains(grains))
}

/// Median and 99th percentile of `samples` (sorted in place).
fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: usize| {
        let i = (samples.len() * q / 100).min(samples.len().saturating_sub(1));
        samples.get(i).copied().unwrap_or_default()
    };
    (at(50), at(99))
}

/// Times `f` for about `budget` (within [`MIN_ITERS`]..[`MAX_ITERS`] runs).
fn time_it<T>(budget: Duration, mut f: impl FnMut() -> T) -> (Duration, Duration, usize) {
    for _ in 0..WARM_UP {
        std::hint::black_box(f());
    }
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < MAX_ITERS && (samples.len() < MIN_ITERS || start.elapsed() < budget) {
        let t = Instant::now();
        std::hint::black_box(f());
        samples.push(t.elapsed());
    }
    let n = samples.len();
    let (p50, p99) = percentiles(&mut samples);
    (p50, p99, n)
}

fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// "allowed by entry 4", "denied".
fn verdict(d: &Decision) -> String {
    match &d.reason {
        Reason::Granted(grants) => {
            let by: Vec<String> = grants
                .iter()
                .map(|g| match &g.by {
                    GrantedBy::Entry(e) => format!("entry {}", e.index),
                    GrantedBy::Whitelist => "the whitelist".to_owned(),
                })
                .collect();
            format!("allowed by {}", by.join(", "))
        }
        _ if d.allowed => "allowed".to_owned(),
        _ => "denied".to_owned(),
    }
}

struct Options {
    minions: usize,
    seconds: f64,
    user: String,
    only: Option<String>,
    jsonl: Option<String>,
    print: Option<Print>,
}

/// What `--print-acl` and `--print-cases` ask for.
#[derive(Clone, Copy)]
enum Print {
    Acl,
    Cases,
}

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        minions: 10_000,
        seconds: 1.0,
        user: "halitebench".to_owned(),
        only: None,
        jsonl: None,
        print: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--minions" => {
                o.minions = value("--minions")?
                    .parse()
                    .ok()
                    .filter(|n| *n >= 10)
                    .ok_or("--minions: a whole number >= 10")?;
            }
            "--seconds" => {
                o.seconds = value("--seconds")?
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 600.0)
                    .ok_or("--seconds: a number in (0, 600]")?;
            }
            "--user" => o.user = value("--user")?,
            "--only" => o.only = Some(value("--only")?),
            "--jsonl" => o.jsonl = Some(value("--jsonl")?),
            "--print-acl" => o.print = Some(Print::Acl),
            "--print-cases" => o.print = Some(Print::Cases),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("acl_cost: {e}");
            }
            eprintln!(
                "usage: acl_cost [--minions N] [--seconds S] [--user NAME] [--only TEXT] \
                 [--jsonl FILE] [--print-acl | --print-cases]"
            );
            return ExitCode::from(2);
        }
    };
    let entries: serde_json::Value = match serde_json::from_str(ACL) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("acl_cost: the built-in ACL is not JSON: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = serde_json::json!({ o.user.as_str(): entries });
    match o.print {
        Some(Print::Acl) => {
            println!("{config}");
            return ExitCode::SUCCESS;
        }
        Some(Print::Cases) => {
            let list: Vec<serde_json::Value> = cases().iter().map(Case::to_json).collect();
            println!("{}", serde_json::Value::Array(list));
            return ExitCode::SUCCESS;
        }
        None => {}
    }
    let mut jsonl = match o.jsonl.as_deref().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("{path}: {e}"))
    }) {
        None => None,
        Some(Ok(file)) => Some(file),
        Some(Err(e)) => {
            eprintln!("acl_cost: --jsonl {e}");
            return ExitCode::FAILURE;
        }
    };
    let (acl, warnings) =
        UserAcl::parse(&halite_target::testutil::from_json(&config), Matching::Full);
    if !warnings.is_empty() {
        for w in &warnings {
            eprintln!("acl_cost: {w}");
        }
        return ExitCode::FAILURE;
    }
    let entry_count = entries.as_array().map_or(0, Vec::len);
    let (ids, grains) = fleet(o.minions);
    let regexes = RegexCache::new(256);
    let ck = CkMinions {
        accepted: &ids,
        cache: &grains,
        regexes: &regexes,
        minion_data_cache: true,
        nodegroups: None,
    };
    let budget = Duration::from_secs_f64(o.seconds);
    let whitelist = ["saltutil.find_job"];
    println!(
        "UserAcl::check for user {:?}: {} accepted minions ({} with grains), {} ACL entries, \
         acl_regex_match full; {} s per case",
        o.user,
        ids.len(),
        grains.0.len(),
        entry_count,
        o.seconds,
    );
    println!();
    println!(
        "| case | publish | decision | evaluations (minions) | check median (µs) | \
         check p99 (µs) | master step median / p99 (µs) | expand request (µs, not ACL) | \
         checks | < 1 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut all_met = true;
    let chosen = cases()
        .into_iter()
        .filter(|c| o.only.as_deref().is_none_or(|t| c.name.contains(t)));
    for c in chosen {
        let (fun, arg, tgt) = (Value::from(c.fun), c.arg_value(), Value::from(c.tgt));
        let expected: Vec<String> = ck
            .check_minions(&tgt, c.tgt_type, halite_target::DEFAULT_DELIMITER, true)
            .minions
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut req = Request::new(&fun, &arg, &tgt, c.tgt_type);
        req.minions = Some(&expected);
        let targets = Counting {
            ck,
            calls: Cell::new(0),
            minions: Cell::new(0),
        };
        let decision = acl.check(&o.user, &req, &targets, &whitelist);
        let (calls, evaluated) = (targets.calls.get(), targets.minions.get());
        let reference = acl.check(&o.user, &req, &ExpandAll(ck), &whitelist);
        if reference != decision {
            eprintln!(
                "acl_cost: {}: decided {decision}; with every entry expanded over all accepted \
                 minions: {reference}",
                c.name
            );
            return ExitCode::FAILURE;
        }
        let (p50, p99, n) = time_it(budget, || acl.check(&o.user, &req, &targets, &whitelist));
        // The master's publish_verdict: the check on the expected minions, and the text.
        let (m50, m99, _) = time_it(budget, || {
            let mut req = Request::new(&fun, &arg, &tgt, c.tgt_type);
            req.minions = Some(&expected);
            acl.check(&o.user, &req, &targets, &whitelist).to_string()
        });
        let (e50, _, _) = time_it(budget / 4, || {
            ck.check_minions(&tgt, c.tgt_type, halite_target::DEFAULT_DELIMITER, true)
                .minions
                .len()
        });
        let met = p50 < GOAL && p99 < GOAL && m50 < GOAL && m99 < GOAL;
        all_met &= met;
        let args: String = c.arg.iter().map(|a| format!(" {a:?}")).collect();
        println!(
            "| {} | `{}{}` → `{}` ({}, {} minions) | {} | {} ({}) | {} | {} | {} / {} | {} | {} | {} |",
            c.name,
            c.fun,
            args,
            c.tgt,
            c.tgt_type,
            expected.len(),
            verdict(&decision),
            calls,
            evaluated,
            micros(p50),
            micros(p99),
            micros(m50),
            micros(m99),
            micros(e50),
            n,
            if met { "yes" } else { "**no**" }
        );
        if let Some(file) = jsonl.as_mut() {
            let us = |d: Duration| (d.as_secs_f64() * 1e8).round() / 100.0;
            let record = serde_json::json!({
                "name": c.name,
                "minions": expected.len(),
                "allowed": decision.allowed,
                "decision": verdict(&decision),
                "evaluations": calls,
                "minions_evaluated": evaluated,
                "check_p50_us": us(p50),
                "check_p99_us": us(p99),
                "master_p50_us": us(m50),
                "master_p99_us": us(m99),
                "expand_us": us(e50),
                "checks": n,
            });
            if let Err(e) = writeln!(file, "{record}") {
                eprintln!("acl_cost: --jsonl: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!();
    println!(
        "goal (< 1 ms per check, median and p99, check and master step): {}",
        if all_met {
            "met in every case"
        } else {
            "MISSED in at least one case"
        }
    );
    ExitCode::SUCCESS
}
