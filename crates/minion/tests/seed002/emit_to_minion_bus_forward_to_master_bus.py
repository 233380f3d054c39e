# needed for config to opts processing
import os
import salt.syspaths as syspaths
import salt.config

# get opts from minion config file, this function also looks in drop dir!
opts = salt.config.minion_config(os.path.join(syspaths.CONFIG_DIR, 'minion'))

# debug to STDOUT
import salt._logging  # 3008: salt.log is gone; was `import salt.log`
salt._logging.setup_console_handler(log_level='all')  # 3008: was salt.log.setup_console_logger('all')

# event libary for events over ZMQ
import salt.utils.event

tag = 'mytag'

# a list of event ret objects
events = [
    {'message':'a drap in the bucket', 'tag': tag },
    {'message':'a drep in the bucket', 'tag': tag },
    {'message':'a drip in the bucket', 'tag': tag },
    {'message':'a drop in the bucket', 'tag': tag },
    {'message':'a drup in the bucket', 'tag': tag },
]

# multi event example, supports a list of event ret objects
payload = {
    'id': opts['id'],
    'events': events,
    'tag': None,
    'pretag': None,
    'data': None
}

print (payload)

# opts must valid minion ID else it binds to invalid socket
event = salt.utils.event.SaltEvent('minion', opts=opts)  # 3008: was SaltEvent('minion', **opts)

# Fire event payload with 'fire_master' tag which the
# salt-minion daemon will forward to the master event bus!
event.fire_event(payload, 'fire_master')
