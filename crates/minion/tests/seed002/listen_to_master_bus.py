import os  # the test sets the master's sock_dir; was the literal '/var/run/salt/master'

# debug logging to STDOUT
import salt._logging  # 3008: salt.log is gone; was `import salt.log`
salt._logging.setup_console_handler(log_level='all')  # 3008: was salt.log.setup_console_logger('all')

# event libary for events over ZMQ
import salt.utils.event

# create event object, attach to master socket …
event = salt.utils.event.MasterEvent(os.environ.get('SALT_MASTER_SOCK_DIR', '/var/run/salt/master'))

tag = 'mytag'

print('Listening for events tagged \'{}\' on Salt Master bus.'.format(tag))

# generator iterator yields events forever, we filter on tag
for data in event.iter_events(tag=tag):
    print(data)
