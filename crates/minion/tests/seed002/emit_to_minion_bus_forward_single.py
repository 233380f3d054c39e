# Not in the seed: the single-event form of emit_to_minion_bus_forward_to_master_bus.py,
# the payload `event.fire_master` puts on the minion bus (salt/modules/event.py), in the
# seed's style.

# needed for config to opts processing
import os
import salt.syspaths as syspaths
import salt.config

# get opts from minion config file, this function also looks in drop dir!
opts = salt.config.minion_config(os.path.join(syspaths.CONFIG_DIR, 'minion'))

# debug to STDOUT
import salt._logging
salt._logging.setup_console_handler(log_level='all')

# event libary for events over ZMQ
import salt.utils.event

tag = 'mytag'

# single event example: data and tag, no events list
payload = {
    'data': {'message': 'a single drop for the master'},
    'tag': tag,
    'events': None,
    'pretag': None,
}

print (payload)

# opts must valid minion ID else it binds to invalid socket
event = salt.utils.event.SaltEvent('minion', opts=opts)

# Fire event payload with 'fire_master' tag which the
# salt-minion daemon will forward to the master event bus!
event.fire_event(payload, 'fire_master')
