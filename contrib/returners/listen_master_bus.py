# Prints every master_bus return tagged TAG (default: monitoring) as one JSON line.
# Run it on the master as the master's user: python3 listen_master_bus.py [TAG [SOCK_DIR]]
import json, sys
import salt.utils.event

tag = sys.argv[1] if len(sys.argv) > 1 else "monitoring"
bus = salt.utils.event.MasterEvent(sys.argv[2] if len(sys.argv) > 2 else "/var/run/salt/master")
for event in bus.iter_events(tag=tag, match_type="fnmatch"):
    # event["id"] is the minion as the master authenticated it; event["data"] the returner's.
    print(json.dumps({"minion": event["id"], **event["data"]}), flush=True)
