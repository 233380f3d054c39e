"""
Return a job's result to the master's event bus under a tag of your choosing.

This is Halite's built-in ``master_bus`` returner for stock ``salt-minion``\\ s, so that
a mixed fleet answers the same command line with the same events::

    salt '*' --return master_bus --return_kwargs '{"tag": "monitoring"}' \\
        cmd.run_all '/usr/lib/nagios/plugins/check_procs -w 150 -c 200'

Each minion fires ``event.fire_master`` with ``{"id", "jid", "fun", "fun_args",
"return", "retcode", "success"}`` of its return under the tag. The master puts it on its
bus as it puts every minion event: ``{"id": <minion>, "cmd": "_minion_event", "data":
<those fields>, "tag": <tag>, ...}``, where a script using ``salt.utils.event`` (or
``halite event listen``) subscribed to the tag picks it up.

The tag is the option ``tag``: ``--return_kwargs '{"tag": ...}'``, or in the minion
config ``master_bus.tag: monitoring`` (or ``master_bus: {tag: monitoring}``, or
``alternative.master_bus.tag`` with ``--return_config alternative``); default
``salt/return/master_bus``.

Install on a stock minion, one of:

- from a stock master's file roots: put this file in ``<file_root>/_returners/`` and run
  ``salt '*' saltutil.sync_returners`` (a Halite master serves no files);
- by hand: copy it to ``<extension_modules>/returners/master_bus.py`` on the minion
  (``extension_modules`` defaults to ``/var/cache/salt/minion/extmods``) and restart the
  minion.

Difference from the Halite minion: a stock minion that is not connected to its master
when the job ends drops the event (Halite's keeps it in its ``fire_master`` queue and
sends it when the master is back).
"""

import salt.returners

__virtualname__ = "master_bus"

DEFAULT_TAG = "salt/return/master_bus"
FIELDS = ("id", "jid", "fun", "fun_args", "return", "retcode", "success")


def __virtual__():
    return __virtualname__


def returner(ret):
    """
    Fire the return on the master bus under the configured tag.
    """
    options = salt.returners.get_returner_options(
        __virtualname__,
        ret,
        {"tag": "tag"},
        __salt__=__salt__,
        __opts__=__opts__,
        defaults={"tag": DEFAULT_TAG},
    )
    tag = options["tag"]
    if not isinstance(tag, str):
        raise TypeError(f"master_bus tag must be a string, not {type(tag).__name__}")
    data = {field: ret.get(field) for field in FIELDS}
    if not __salt__["event.fire_master"](data, tag):
        raise RuntimeError(f"the minion could not fire the return under tag {tag}")
