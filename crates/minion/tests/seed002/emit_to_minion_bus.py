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
data = {'message':'a drop in the bucket'}

payload = {
    'id': opts['id'],
    'tag': tag,
    'data': data,
}

print (payload)

# opts must valid minion ID else it binds to invalid socket
event = salt.utils.event.SaltEvent('minion', opts=opts)  # 3008: was SaltEvent('minion', **opts)

# Fire event payload with tag
event.fire_event(payload, tag)
