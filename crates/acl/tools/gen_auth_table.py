"""Regenerate crates/acl/tests/salt_auth_table.json from the stock Salt in the venv.

Run from the workspace root:

    .salt-venv/bin/python crates/acl/tools/gen_auth_table.py

Every case is decided by stock Salt 3008.3 itself:
* kind "auth":   salt.utils.minions.CkMinions(opts).auth_check(...)
* kind "peer":   the peer id-key matching of AESFuncs.__verify_minion_publish (re.match on
                 each `peer` key, every matching list concatenated), then auth_check with
                 publish_validate=True, as that method does
* kind "runner": the `peer_run` check of RemoteFuncs.minion_runner
* kind "spec":   CkMinions.spec_check (runner/wheel/cloud ACLs)
* kind "user":   a publish by a local user with a key, as ClearFuncs.publish decides it:
                 LoadAuth.check_authentication(load, "user", key=...) (key authentication,
                 then `publisher_acl` via get_values_of_matching_keys / expr_match; an empty
                 list is "UserAuthenticationError"), then auth_check with the target's
                 check_minions expansion and whitelist ["saltutil.find_job"]
* kind "user_runner": check_authentication as for "user", then CkMinions.spec_check(...,
                 "runner") on the user's list. Stock ClearFuncs.runner checks nothing for a
                 user key (any user with a key runs any runner); this is the check Salt
                 applies to eauth runner calls, which Halite applies to user keys
* kind "blacklist": salt.acl.PublisherACL(publisher_acl_blacklist): user_is_blacklisted(user)
                 or cmd_is_blacklisted(fun), as ClearFuncs.publish asks first; "allowed"
                 means not blacklisted

Targets are expanded by Salt's real CkMinions against a throw-away master root: accepted
keys written into pki_dir/minions, grains and pillar stored in the minion data cache, and
`nodegroups` in the config. The same fixture is written into the JSON so the Rust test
expands targets with halite_target::CkMinions over identical data.

Each case also records what Halite must answer under `acl_regex_match: full` and
`prefix`. They default to Salt's answer; a case that differs says so in `note`
(`deviation` is true when even the prefix mode differs from Salt). A Salt exception
(`salt_raised`) is a denial: the master's handler turns it into an empty reply.
"""

import json
import os
import re
import shutil
import tempfile

import salt.acl
import salt.auth
import salt.cache
import salt.config
import salt.utils.minions
import salt.version

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "salt_auth_table.json")

FIXTURE = {
    "accepted": [
        "web1",
        "web2",
        "db1",
        "web.example.com",
        "web.example.com.evil.org",
        "app.foo.org",
    ],
    "grains": {
        "web1": {"os": "Debian", "role": "web"},
        "web2": {"os": "RedHat", "role": "web"},
        "db1": {"os": "Debian", "role": "db"},
        "web.example.com": {"os": "Debian"},
        "app.foo.org": {"os": "Ubuntu"},
    },
    "pillar": {
        "web1": {"env": "prod"},
        "web2": {"env": "production"},
        "db1": {"env": "prod"},
    },
    "nodegroups": {"webs": "L@web1,web2"},
}

ANCHOR = "anchoring: Salt's re.match admits a longer text; full match does not"
MULTI = "deviation: Salt authorises a multi-function job when any one function is allowed"
USER_ANCHOR = ("anchoring: Salt's \\A<key>\\Z does not group the key, so the first branch of "
               "an alternation admits longer user names; \\A(?:<key>)\\Z does not")


def make_ckminions(root):
    pki = os.path.join(root, "pki")
    os.makedirs(os.path.join(pki, "minions"))
    conf = os.path.join(root, "master")
    with open(conf, "w") as f:
        json.dump(
            {
                "root_dir": root,
                "pki_dir": pki,
                "cachedir": os.path.join(root, "cache"),
                "sock_dir": os.path.join(root, "sock"),
                "log_file": os.path.join(root, "log"),
                "user": os.environ.get("USER", "root"),
                "nodegroups": FIXTURE["nodegroups"],
            },
            f,
        )
    opts = salt.config.master_config(conf)
    for minion in FIXTURE["accepted"]:
        with open(os.path.join(pki, "minions", minion), "w") as f:
            f.write("-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n")
    cache = salt.cache.factory(opts)
    for minion, grains in FIXTURE["grains"].items():
        cache.store("grains", minion, grains)
    for minion, pillar in FIXTURE["pillar"].items():
        cache.store("pillar", minion, pillar)
    return salt.utils.minions.CkMinions(opts)


CASES = []


def case(kind, name, full=None, prefix=None, note=None, **fields):
    CASES.append(
        dict(kind=kind, name=name, full=full, prefix=prefix, note=note, **fields)
    )


def auth(name, acl, fun, arg, tgt="*", tgt_type="glob", minions=None,
         publish_validate=False, whitelist=None, **kw):
    case("auth", name, acl=acl, fun=fun, arg=arg, tgt=tgt, tgt_type=tgt_type,
         minions=minions, publish_validate=publish_validate, whitelist=whitelist, **kw)


def peer(name, peer_cfg, id_, fun, arg, tgt="*", tgt_type="glob", **kw):
    case("peer", name, peer=peer_cfg, id=id_, fun=fun, arg=arg, tgt=tgt,
         tgt_type=tgt_type, **kw)


def runner(name, peer_run, id_, fun, **kw):
    case("runner", name, peer_run=peer_run, id=id_, fun=fun, **kw)


def spec(name, acl, fun, form="runner", kwarg=None, **kw):
    case("spec", name, acl=acl, fun=fun, form=form,
         kwarg={} if kwarg is None else kwarg, **kw)


def user(name, publisher_acl, user_, fun, arg, tgt="*", tgt_type="glob", **kw):
    case("user", name, publisher_acl=publisher_acl, user=user_, fun=fun, arg=arg, tgt=tgt,
         tgt_type=tgt_type, whitelist=["saltutil.find_job"], **kw)


def user_runner(name, publisher_acl, user_, fun, kwarg=None, **kw):
    case("user_runner", name, publisher_acl=publisher_acl, user=user_, fun=fun,
         kwarg={} if kwarg is None else kwarg, **kw)


def blacklist(name, blacklist_cfg, user_, fun, **kw):
    case("blacklist", name, blacklist=blacklist_cfg, user=user_, fun=fun, **kw)


SEED = {".*example.com": ["test.*", "ps.*", "pkg.*"], ".*foo.org": ["test.*", "ps.*", "pkg.*"]}

# --- peer: seed 000 and id-key matching ---------------------------------------------------
peer("seed000 admits web.example.com", SEED, "web.example.com", "test.ping", [])
peer("seed000 suffix key vs web.example.com.evil.org", SEED, "web.example.com.evil.org",
     "test.ping", [], full=False, note=ANCHOR)
peer("seed000 refuses functions outside the list", SEED, "web.example.com", "cmd.run", [])
peer("seed000 second key admits app.foo.org", SEED, "app.foo.org", "pkg.install", ["vim"])
peer("seed000 bare domain matches too", SEED, "example.com", "test.ping", [])
peer("seed000 dot in key is a wildcard", SEED, "webXexampleYcom", "test.ping", [])
peer("seed000 unlisted minion refused", SEED, "db1", "test.ping", [])
peer("open peer allows anything", {".*": [".*"]}, "db1", "cmd.run", ["ls"])
peer("id key web1 vs id web10", {"web1": ["test.*"]}, "web10", "test.ping", [],
     full=False, note=ANCHOR)
peer("id key web1$ refuses web10", {"web1$": ["test.*"]}, "web10", "test.ping", [])
peer("every matching key contributes", {"web.*": ["test.*"], ".*": ["grains.items"]},
     "web1", "grains.items", [])
peer("keys that do not match contribute nothing", {"web.*": ["test.*"]}, "db1",
     "test.ping", [])
peer("non-list peer value is ignored", {".*": "test.*"}, "web1", "test.ping", [])
peer("invalid peer key: Salt fails every request", {"web(": [".*"], ".*": ["test.*"]},
     "web1", "test.ping", [], full=True, prefix=True,
     note="deviation: Salt raises re.error for the whole request; Halite ignores the bad key")
peer("peer map that is not a dict", [".*"], "web1", "test.ping", [])
peer("publish_validate refuses pillar glob", {".*": [".*"]}, "web1", "test.ping", [],
     tgt="env:prod*", tgt_type="pillar")
peer("publish_validate allows exact pillar", {".*": [".*"]}, "web1", "test.ping", [],
     tgt="env:prod", tgt_type="pillar")
peer("publish_validate refuses pillar pcre", {".*": [".*"]}, "web1", "test.ping", [],
     tgt="env:prod.*", tgt_type="pillar_pcre")
peer("publish_validate refuses I@ glob in compound", {".*": [".*"]}, "web1", "test.ping",
     [], tgt="I@env:prod*", tgt_type="compound")
peer("publish_validate allows grain compound", {".*": [".*"]}, "web1", "test.ping", [],
     tgt="G@os:Debian and web*", tgt_type="compound")
peer("peer kwargs rule never sees raw k=v", {".*": [{"*": [{"test.arg": {"kwargs": {"a": "1.*"}}}]}]},
     "web1", "test.arg", ["a=12"])
peer("peer args rule sees raw k=v as positional", {".*": [{"*": [{"test.arg": {"args": ["a=1.*"]}}]}]},
     "web1", "test.arg", ["a=12"])
peer("peer args rule ls vs ls -l", {".*": [{"*": [{"cmd.run": {"args": ["ls"]}}]}]},
     "web1", "cmd.run", ["ls -l"], full=False, note=ANCHOR)
peer("peer dict entry target subset", {".*": [{"web*": ["test.*"]}]}, "db1", "test.ping",
     [], tgt="db1")

# --- function regexes -----------------------------------------------------------------------
auth("cmd.run allows cmd.run", ["cmd.run"], "cmd.run", ["ls"])
auth("cmd.run vs cmd.run_all", ["cmd.run"], "cmd.run_all", ["ls"], full=False, note=ANCHOR)
auth("cmd.run$ refuses cmd.run_all", ["cmd.run$"], "cmd.run_all", ["ls"])
auth("test.* admits testing.ping", ["test.*"], "testing.ping", [])
auth("test admits test.ping by prefix only", ["test"], "test.ping", [], full=False,
     note=ANCHOR)
auth("escaped dot refuses testing.ping", ["test\\..*"], "testing.ping", [])
auth("escaped dot allows test.ping", ["test\\..*"], "test.ping", [])
auth(".* allows anything", [".*"], "cmd.script", [])
auth("regexes are case-sensitive", ["TEST.*"], "test.ping", [])
auth("alternation group allows pkg.install", ["pkg.(install|remove)"], "pkg.install", [])
auth("alternation group vs pkg.installed", ["pkg.(install|remove)"], "pkg.installed", [],
     full=False, note=ANCHOR)
auth("later string entry allows", ["pkg.*", "test.*"], "test.echo", ["hi"])

# --- invalid regexes and malformed entries --------------------------------------------------
auth("invalid regex never matches", ["test.("], "test.ping", [])
auth("invalid regex then valid entry", ["test.(", "test.*"], "test.ping", [])
auth("invalid regex in a condition", [{"*": ["cmd.[run"]}], "cmd.run", [])
auth("invalid condition, valid string entry", [{"*": ["test.*("]}, "test.ping"], "test.ping", [])
auth("auth_list None", None, "test.ping", [])
auth("auth_list is a string", "test.ping", "test.ping", [], full=False, prefix=False,
     note="deviation: Salt iterates the string's characters as regexes ('t' matches)")
auth("auth_list is a dict", {"web*": ["test.*"]}, "webserver.restart", [], full=False,
     prefix=False,
     note="deviation: Salt iterates the dict's keys as function regexes ('web*')")
auth("non-string non-dict entries are skipped", [5, None, ["test.*"]], "test.ping", [])
auth("two-key dict entry is skipped", [{"web*": ["test.*"], "db*": ["test.*"]}], "test.ping", [],
     tgt="web1")
auth("empty dict entry is skipped", [{}], "test.ping", [])
auth("single condition is wrapped", [{"*": "test.ping"}], "test.ping", [])
auth("non-string condition is skipped", [{"*": [5]}], "test.ping", [])
auth("two-key condition is skipped", [{"*": [{"test.ping": {}, "test.echo": {}}]}], "test.ping", [])
auth("unknown arg-spec key", [{"*": [{"test.arg": {"arg": ["x"]}}]}], "test.arg", ["y"],
     full=False, prefix=False,
     note="deviation: Salt ignores the unknown key 'arg' and allows any arguments")
auth("args given as a string", [{"*": [{"test.arg": {"args": "a"}}]}], "test.arg", ["abc"],
     full=False, prefix=False,
     note="deviation: Salt iterates the string 'a' as a list of rules")
auth("args null", [{"*": [{"test.arg": {"args": None}}]}], "test.arg", ["abc"])
auth("kwargs null", [{"*": [{"test.arg": {"kwargs": None}}]}], "test.arg", ["abc"])
auth("kwargs as a list", [{"*": [{"test.arg": {"kwargs": ["a"]}}]}], "test.arg",
     [{"__kwarg__": True, "a": 1}])
auth("raising entry then allowing entry", [{"*": [{"test.arg": {"kwargs": None}}]}, "test.*"],
     "test.arg", [], full=True, prefix=True,
     note="deviation: Salt raises on the first entry and denies; Halite skips it")
auth("empty ACL", [], "test.ping", [])

# --- targets ----------------------------------------------------------------------------------
WEB = [{"web*": ["test.*"]}]
auth("target glob inside the entry", WEB, "test.ping", [], tgt="web*")
auth("target * is not inside web*", WEB, "test.ping", [], tgt="*")
auth("unaccepted ids in a list are ignored", WEB, "test.ping", [], tgt="web1,nope",
     tgt_type="list")
auth("entries never combine", [{"web1": ["test.*"]}, {"db1": ["test.*"]}], "test.ping", [],
     tgt="web1,db1", tgt_type="list")
auth("L@ entry covers a list target", [{"L@web1,db1": ["test.*"]}], "test.ping", [],
     tgt="web1,db1", tgt_type="list")
auth("G@ entry allows a Debian minion", [{"G@os:Debian": ["test.*"]}], "test.ping", [],
     tgt="web1")
auth("G@ entry refuses a RedHat minion", [{"G@os:Debian": ["test.*"]}], "test.ping", [],
     tgt="web2")
auth("G@ entry vs the same grain target", [{"G@os:Debian": ["test.*"]}], "test.ping", [],
     tgt="os:Debian", tgt_type="grain")
auth("compound entry allows web1", [{"web* and G@os:Debian": ["test.*"]}], "test.ping", [],
     tgt="web1")
auth("compound entry refuses web*", [{"web* and G@os:Debian": ["test.*"]}], "test.ping", [],
     tgt="web*")
auth("E@ entry allows web1", [{"E@web[0-9]+": ["test.*"]}], "test.ping", [], tgt="web1")
auth("E@ entry refuses web.example.com", [{"E@web[0-9]+": ["test.*"]}], "test.ping", [],
     tgt="web.example.com")
auth("or compound entry", [{"web1 or db1": ["test.*"]}], "test.ping", [], tgt="web1,db1",
     tgt_type="list")
auth("N@ entry", [{"N@webs": ["test.*"]}], "test.ping", [], tgt="web2")
auth("N@ entry refuses db1", [{"N@webs": ["test.*"]}], "test.ping", [], tgt="db1")
auth("* entry allows any target", [{"*": ["test.*"]}], "test.ping", [], tgt="*")
auth("target matching nobody passes", WEB, "test.ping", [], tgt="nope*")
auth("@runner target never matches minions", [{"@runner": [".*"]}], "test.ping", [], tgt="web1")
auth("@runner string never grants functions", ["@runner"], "test.ping", [])
auth("precomputed minions are used", WEB, "test.ping", [], tgt="*", minions=["web1"])
auth("function outside the entry", WEB, "cmd.run", [], tgt="web1")
auth("second entry allows", [{"web*": ["test.*"]}, {"*": ["cmd.run"]}], "cmd.run", ["ls"],
     tgt="web1")
auth("pcre target inside E@ entry", [{"E@web[0-9]": ["test.*"]}], "test.ping", [],
     tgt="web[12]", tgt_type="pcre")

# --- args / kwargs --------------------------------------------------------------------------
AB = [{"*": [{"test.arg": {"args": ["a.*", "b.*"]}}]}]
auth("args both match", AB, "test.arg", ["abc", "bcd"])
auth("args second missing", AB, "test.arg", ["abc"])
auth("args first wrong", AB, "test.arg", ["xbc", "bcd"])
auth("extra positional args allowed", AB, "test.arg", ["abc", "bcd", "zzz"])
NONE_B = [{"*": [{"test.arg": {"args": [None, "b"]}}]}]
auth("None rule accepts any present arg", NONE_B, "test.arg", ["anything", "b"])
auth("None rule requires presence", NONE_B, "test.arg", ["anything"])
ONE = [{"*": [{"test.arg": {"args": ["1"]}}]}]
auth("number arg compared via str", ONE, "test.arg", [1])
auth("number 12 vs rule 1", ONE, "test.arg", [12], full=False, note=ANCHOR)
auth("float arg via str", [{"*": [{"test.arg": {"args": ["1\\.5"]}}]}], "test.arg", [1.5])
auth("bool arg via str", [{"*": [{"test.arg": {"args": ["True"]}}]}], "test.arg", [True])
auth("None arg via str", [{"*": [{"test.arg": {"args": ["None"]}}]}], "test.arg", [None])
auth("list arg via str", [{"*": [{"test.arg": {"args": ["\\['a', 1\\]"]}}]}], "test.arg",
     [["a", 1]])
auth("args rule ls vs injected command", [{"*": [{"cmd.run": {"args": ["ls"]}}]}], "cmd.run",
     ["ls; rm -rf /"], full=False, note=ANCHOR)
KW = [{"*": [{"test.arg": {"kwargs": {"a": "1.*", "b": None}}}]}]
auth("kwargs without __kwarg__ map", KW, "test.arg", ["a=12", "b=1"])
auth("kwargs with __kwarg__ map", KW, "test.arg", [{"__kwarg__": True, "a": 12, "b": None}])
auth("kwargs None rule requires presence", KW, "test.arg", [{"__kwarg__": True, "a": 12}])
auth("kwargs value mismatch", KW, "test.arg", [{"__kwarg__": True, "a": 2, "b": 1}])
auth("kwargs number vs prefix rule", [{"*": [{"test.arg": {"kwargs": {"a": "1"}}}]}], "test.arg",
     [{"__kwarg__": True, "a": 12}], full=False, note=ANCHOR)
auth("__kwarg__ False still marks kwargs", [{"*": [{"test.arg": {"kwargs": {"a": "1"}}}]}],
     "test.arg", [{"__kwarg__": False, "a": 1}])
auth("__kwarg__ map not last is positional", [{"*": [{"test.arg": {"kwargs": {"a": None}}}]}],
     "test.arg", [{"__kwarg__": True, "a": 1}, "x"])
auth("args and kwargs together", [{"*": [{"test.arg": {"args": ["x"], "kwargs": {"k": "v"}}}]}],
     "test.arg", ["x", {"__kwarg__": True, "k": "v"}])
auth("any one spec of a list", [{"*": [{"test.arg": [{"args": ["a"]}, {"args": ["b"]}]}]}],
     "test.arg", ["b"])
auth("no spec of a list passes", [{"*": [{"test.arg": [{"args": ["a"]}, {"args": ["b"]}]}]}],
     "test.arg", ["c"])
auth("empty spec allows any args", [{"*": [{"test.arg": {}}]}], "test.arg", ["x", "y"])
auth("empty spec list allows nothing", [{"*": [{"test.arg": []}]}], "test.arg", ["x"])
auth("arg restriction under a target entry", [{"web*": [{"cmd.run": {"args": ["ls"]}}]}],
     "cmd.run", ["ls"], tgt="web1")
auth("arg restriction under a target entry, wrong target",
     [{"web*": [{"cmd.run": {"args": ["ls"]}}]}], "cmd.run", ["ls"], tgt="db1")

# --- multi-function jobs ----------------------------------------------------------------------
auth("multi: one allowed function authorises the job in Salt", [{"*": ["test.ping"]}],
     ["test.ping", "cmd.run"], [[], ["rm -rf /"]], full=False, prefix=False, note=MULTI)
auth("multi: every function allowed", ["test.ping", "cmd.run"], ["test.ping", "cmd.run"],
     [[], ["ls"]])
auth("multi: first function refused", ["test.*"], ["cmd.run", "test.ping"], [["ls"], []],
     full=False, prefix=False, note=MULTI)
auth("multi: whitelisted function authorises the job in Salt", ["test.*"],
     ["saltutil.find_job", "cmd.run"], [[], []], whitelist=["saltutil.find_job"],
     full=False, prefix=False, note=MULTI)
auth("whitelisted single function", ["test.*"], "saltutil.find_job", ["20240101"],
     whitelist=["saltutil.find_job"])
auth("multi: whitelist plus allowed function", ["test.*"], ["saltutil.find_job", "test.ping"],
     [[], []], whitelist=["saltutil.find_job"])
MULTI_ARGS = [{"*": ["test.ping", {"cmd.run": {"args": ["ls"]}}]}]
auth("multi: args checked per function", MULTI_ARGS, ["test.ping", "cmd.run"], [[], ["ls"]])
auth("multi: second function's args refused", MULTI_ARGS, ["test.ping", "cmd.run"],
     [[], ["rm"]], full=False, prefix=False, note=MULTI)
auth("multi: empty function list", [".*"], [], [])
auth("multi: short arg list with string entry", [".*"], ["test.ping", "cmd.run"], [[]])

# --- runner / wheel spec_check ----------------------------------------------------------------
spec("@runner grants runners", ["@runner"], "manage.up")
spec("@manage grants manage", ["@manage"], "manage.up")
spec("@jobs does not grant manage", ["@jobs"], "manage.up")
spec("@runners plural grants", ["@runners"], "manage.up")
spec("plain regexes never grant runners", [".*", {"*": [".*"]}], "manage.up")
spec("@manage map matches function name", [{"@manage": ["up"]}], "manage.up")
spec("@manage map refuses other functions", [{"@manage": ["up"]}], "manage.status")
spec("@manage map does not see the module", [{"@manage": ["manage.up"]}], "manage.up")
spec("@runner map matches the full name", [{"@runner": ["manage.*"]}], "manage.up")
spec("@manage map prefix vs upgrade", [{"@manage": ["up"]}], "manage.upgrade", full=False,
     note=ANCHOR)
spec("runner name without a dot", ["@runner"], "manage")
spec("empty ACL before the syntax check", [], "manage")
LOOKUP = [{"@runner": [{"jobs.lookup_jid": {"args": ["\\d+"]}}]}]
spec("runner args from kwarg.arg", LOOKUP, "jobs.lookup_jid", kwarg={"arg": ["2024"]})
spec("runner args mismatch", LOOKUP, "jobs.lookup_jid", kwarg={"arg": ["x"]})
spec("runner args absent", LOOKUP, "jobs.lookup_jid")
spec("@wheel grants wheel", ["@wheel"], "key.list_all", form="wheel")
spec("@runner does not grant wheel", ["@runner"], "key.list_all", form="wheel")

# --- peer_run ---------------------------------------------------------------------------------
RUN = {".*example.com": ["manage.*", "jobs.*"]}
runner("peer_run seed admits web.example.com", RUN, "web.example.com", "jobs.list_jobs")
runner("peer_run seed vs evil.org", RUN, "web.example.com.evil.org", "manage.up", full=False,
       note=ANCHOR)
runner("peer_run function prefix", {".*": ["manage.up"]}, "db1", "manage.up_all", full=False,
       note=ANCHOR)
runner("peer_run no matching key", RUN, "db1", "manage.up")
runner("peer_run function not listed", RUN, "web.example.com", "cache.grains")
runner("peer_run invalid regex fails the request in Salt", {".*": ["manage.(", "jobs.*"]}, "db1",
       "jobs.active", full=True, prefix=True,
       note="deviation: Salt raises re.error for the whole request; Halite ignores the bad entry")
runner("peer_run non-list value ignored", {".*": "manage.up"}, "db1", "manage.up")
runner("peer_run every matching key merges", {"db.*": ["jobs.*"], ".*": ["manage.up"]}, "db1",
       "manage.up")

# --- publisher_acl: user keys (salt-semantics.md §2.3) --------------------------------------
USERS = {
    "thatch": [".*"],
    "fred": [{"web*": ["test.*", "pkg.*"]}, {"G@os:RedHat": ["kmod.*"]}],
    "admin|manager_.*": ["saltutil.*"],
    "user_.*": [{"web*": [{"my_mod.*": {"args": ["a.*", "b.*"],
                                         "kwargs": {"kwa": "kwa.*", "kwb": "kwb"}}}]}],
}
KWARGS = {"__kwarg__": True, "kwa": "kwa1", "kwb": "kwb"}
user("fred may test web1", USERS, "fred", "test.ping", [], tgt="web1")
user("fred may test web*", USERS, "fred", "test.ping", [], tgt="web*")
user("fred may not test db1", USERS, "fred", "test.ping", [], tgt="db1")
user("fred may not run cmd on web1", USERS, "fred", "cmd.run", ["ls"], tgt="web1")
user("fred kmod on the RedHat minion", USERS, "fred", "kmod.list", [], tgt="web2")
user("fred kmod on a Debian minion refused", USERS, "fred", "kmod.list", [], tgt="web1")
user("thatch may run anything anywhere", USERS, "thatch", "cmd.run", ["ls"])
user("unknown user is an authentication failure", USERS, "bob", "test.ping", [])
user("admin by the first branch", USERS, "admin", "saltutil.sync_all", [])
user("manager_bob by the second branch", USERS, "manager_bob", "saltutil.sync_all", [])
user("administrator by the ungrouped first branch", USERS, "administrator",
     "saltutil.sync_all", [], full=False, note=USER_ANCHOR)
user("second branch is anchored at both ends", USERS, "xmanager_bob", "saltutil.sync_all", [])
user("regex user key with args and kwargs", USERS, "user_x", "my_mod.go",
     ["apple", "banana", KWARGS], tgt="web1")
user("regex user key, argument mismatch", USERS, "user_x", "my_mod.go",
     ["apple", "cherry", KWARGS], tgt="web1")
user("regex user key, kwarg kwb vs kwbx", USERS, "user_x", "my_mod.go",
     ["apple", "banana", dict(KWARGS, kwb="kwbx")], tgt="web1", full=False, note=ANCHOR)
user("regex user key, target outside web*", USERS, "user_x", "my_mod.go",
     ["apple", "banana", KWARGS], tgt="db1")
user("find_job is whitelisted for an ACL user", {"fred": ["test.*"]}, "fred",
     "saltutil.find_job", ["20240101"])
user("find_job is refused to a user without entries", {"fred": ["test.*"]}, "bob",
     "saltutil.find_job", ["20240101"])
user("glob user key", {"dev_*": ["test.*"]}, "dev_anna", "test.ping", [])
user("regex user key", {"dev[0-9]+": ["test.*"]}, "dev12", "test.ping", [])
user("regex user key is anchored at the end", {"dev[0-9]+": ["test.*"]}, "dev12x",
     "test.ping", [])
user("regex user key is anchored at the start", {"dev[0-9]+": ["test.*"]}, "xdev12",
     "test.ping", [])
user("star user key is a glob for everyone", {"*": ["test.*"]}, "anyone", "test.ping", [])
user("every matching user key contributes", {"fr*": ["test.*"], "f.*": ["grains.items"]},
     "fred", "grains.items", [])
user("user keys that do not match contribute nothing", {"fr*": ["test.*"], "b.*": ["cmd.*"]},
     "fred", "cmd.run", [])
user("grouped alternation matches whole names", {"(admin|ops)": ["test.*"]}, "administrator",
     "test.ping", [])
user("inline flag in a user key is no regex", {"(?i)admin": ["test.*"]}, "ADMIN", "test.ping",
     [])
user("empty list is an authentication failure", {"fred": []}, "fred", "test.ping", [])
user("string value: Salt iterates its characters", {"fred": ".*"}, "fred", "cmd.run", [],
     full=False, prefix=False,
     note="deviation: Salt extends the list with the characters '.' and '*' ('.' admits "
          "every function); Halite grants nothing for a value that is not a list")
user("multi: one allowed function authorises a user's job in Salt", {"fred": ["test.*"]},
     "fred", ["test.ping", "cmd.run"], [[], ["ls"]], full=False, prefix=False, note=MULTI)
user("user function regex prefix", {"fred": ["cmd.run"]}, "fred", "cmd.run_all", ["ls"],
     full=False, note=ANCHOR)

# --- publisher_acl: runners for user keys -----------------------------------------------------
user_runner("@runner user may run manage.up", {"ops": ["@runner"]}, "ops", "manage.up")
user_runner("@jobs user may run jobs", {"fred": ["@jobs", "test.*"]}, "fred",
            "jobs.list_jobs")
user_runner("@jobs user may not run manage", {"fred": ["@jobs", "test.*"]}, "fred",
            "manage.up")
user_runner("plain regexes grant no runner to a user", {"fred": [".*"]}, "fred", "manage.up")
user_runner("@manage map for a user", {"eve": [{"@manage": ["up"]}]}, "eve", "manage.up")
user_runner("@manage map refuses other functions to a user", {"eve": [{"@manage": ["up"]}]}, "eve",
            "manage.down")
user_runner("runner user without entries", {"ops": ["@runner"]}, "bob", "manage.up")
user_runner("runner name without a dot for a user", {"ops": ["@runner"]}, "ops", "manage")
user_runner("runner user by the ungrouped first branch", {"admin|ops": ["@runner"]},
            "administrator", "manage.up", full=False, note=USER_ANCHOR)
user_runner("runner args for a user", {"ops": [{"@runner": [{"jobs.lookup_jid": {"args": ["\\d+"]}}]}]},
            "ops", "jobs.lookup_jid", kwarg={"arg": ["20240101"]})

# --- publisher_acl_blacklist (salt-semantics.md §2.4) -----------------------------------------
BL = {"users": ["root", "^(?!sudo_).*$"], "modules": ["cmd.*", "test.echo", "cmd"]}
blacklist("root is blacklisted", BL, "root", "test.ping")
blacklist("bob is blacklisted by the look-ahead", BL, "bob", "test.ping")
blacklist("sudo_bob is not blacklisted", BL, "sudo_bob", "test.ping")
blacklist("cmd.run is blacklisted", BL, "sudo_bob", "cmd.run")
blacklist("test.echo is blacklisted", BL, "sudo_bob", "test.echo")
blacklist("test.echo2 is not blacklisted", BL, "sudo_bob", "test.echo2")
blacklist("cmd.* also blocks cmdx", BL, "sudo_bob", "cmdx")
blacklist("cmd blocks only cmd", {"modules": ["cmd"]}, "fred", "cmd.run")
blacklist("cmd blocks cmd", {"modules": ["cmd"]}, "fred", "cmd")
blacklist("one blacklisted function blocks the job", BL, "sudo_bob", ["test.ping", "cmd.run"])
blacklist("job without blacklisted functions", BL, "sudo_bob", ["test.ping", "grains.items"])
blacklist("users given as one string", {"users": "bob"}, "bob", "test.ping")
blacklist("string users does not block a longer name", {"users": "bob"}, "bobby", "test.ping")
blacklist("ungrouped alternation blocks administrator", {"users": ["admin|root"]},
          "administrator", "test.ping")
blacklist("last branch of the alternation is anchored", {"users": ["admin|root"]}, "rootkit",
          "test.ping")
blacklist("glob user pattern", {"users": ["dev_*"]}, "dev_anna", "test.ping")
blacklist("star blocks every user", {"users": ["*"]}, "anyone", "test.ping")
blacklist("empty blacklist blocks nothing", {}, "root", "cmd.run")
blacklist("non-string user entries are ignored", {"users": [1000]}, "1000", "test.ping")
blacklist("unknown blacklist key is ignored", {"user": ["bob"]}, "bob", "test.ping")
blacklist("users given as a number", {"users": 5}, "bob", "test.ping")
blacklist("users given as a map", {"users": {"bob": 1}}, "alice", "test.ping",
          full=False, prefix=False,
          note="deviation: Salt reads the map's keys as patterns; Halite treats the list as "
               "malformed and blocks every user")
blacklist("blacklist regex over the backtracking limit", {"users": ["(a|aa)+\\1c"]}, "a" * 32,
          "test.ping", full=False, prefix=False,
          note="deviation: Python finds no match after exponential backtracking; Halite stops "
               "at the backtracking limit and blocks (a blacklist fails closed)")


def run_case(ck, c):
    kind = c["kind"]
    if kind == "auth":
        return ck.auth_check(c["acl"], c["fun"], c["arg"], c["tgt"], c["tgt_type"],
                             publish_validate=c["publish_validate"], minions=c["minions"],
                             whitelist=c["whitelist"])
    if kind == "peer":
        peer_cfg = c["peer"]
        if not isinstance(peer_cfg, dict):
            return False
        perms = []
        for match in peer_cfg:
            if re.match(match, c["id"]):
                if isinstance(peer_cfg[match], list):
                    perms.extend(peer_cfg[match])
        return ck.auth_check(perms, c["fun"], c["arg"], c["tgt"], c["tgt_type"],
                             publish_validate=True)
    if kind == "runner":
        peer_run = c["peer_run"]
        if not isinstance(peer_run, dict):
            return False
        perms = set()
        for match in peer_run:
            if re.match(match, c["id"]):
                if isinstance(peer_run[match], list):
                    perms.update(peer_run[match])
        good = False
        for perm in perms:
            if re.match(perm, c["fun"]):
                good = True
        return good
    if kind == "spec":
        return ck.spec_check(c["acl"], c["fun"], c["kwarg"], c["form"])
    if kind in ("user", "user_runner"):
        loadauth = salt.auth.LoadAuth(dict(ck.opts, publisher_acl=c["publisher_acl"]))
        load = {"user": c["user"], "key": "k"}
        checked = loadauth.check_authentication(load, "user", key={c["user"]: "k"})
        if checked.get("error"):
            return {"error": checked["error"]}
        auth_list = checked["auth_list"]
        if kind == "user_runner":
            return ck.spec_check(auth_list, c["fun"], c["kwarg"], "runner")
        minions = ck.check_minions(c["tgt"], c["tgt_type"])["minions"]
        return ck.auth_check(auth_list, c["fun"], c["arg"], c["tgt"], c["tgt_type"],
                             minions=minions, whitelist=c["whitelist"])
    if kind == "blacklist":
        acl = salt.acl.PublisherACL(c["blacklist"])
        return not (acl.user_is_blacklisted(c["user"]) or acl.cmd_is_blacklisted(c["fun"]))
    raise ValueError(kind)


def main():
    root = tempfile.mkdtemp(prefix="halite-acl-")
    try:
        ck = make_ckminions(root)
        # The fixture must expand as intended, or every target case is meaningless.
        assert sorted(ck.check_minions("*")["minions"]) == sorted(FIXTURE["accepted"])
        assert ck.check_minions("G@os:Debian", "compound")["minions"]
        out = []
        for c in CASES:
            c = dict(c)
            raised = None
            salt_error = None
            try:
                result = run_case(ck, c)
            except Exception as exc:  # pylint: disable=broad-except
                raised = type(exc).__name__
                result = False
            if isinstance(result, dict):
                salt_error = result.get("error", {}).get("name")
                allowed = False
            else:
                allowed = bool(result)
            prefix = allowed if c["prefix"] is None else c["prefix"]
            full = prefix if c["full"] is None else c["full"]
            if (prefix != allowed or full != prefix) and not c["note"]:
                raise SystemExit(f"case {c['name']!r}: Halite differs from Salt without a note")
            if c["note"] and prefix == allowed and full == prefix:
                raise SystemExit(f"case {c['name']!r}: note given but nothing differs")
            if full and not prefix:
                raise SystemExit(f"case {c['name']!r}: full mode may not allow more than prefix")
            c.update(
                salt=allowed,
                salt_raised=raised,
                salt_error=salt_error,
                full=full,
                prefix=prefix,
                deviation=prefix != allowed,
            )
            out.append(c)
        names = [c["name"] for c in out]
        assert len(names) == len(set(names)), "case names must be unique"
        table = {
            "generated_by": "crates/acl/tools/gen_auth_table.py",
            "salt_version": salt.version.__version__,
            "fixture": FIXTURE,
            "cases": out,
        }
        with open(OUT, "w") as f:
            json.dump(table, f, indent=1)
            f.write("\n")
        print(f"{len(out)} cases written to {os.path.relpath(OUT)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
