"""``python -m sparkcap.servers.sim [port] [json] [ready-file]``: a simulated fleet in a process.

Benchmarks and the demo run the simulator in a separate process so that its work never
delays the client's timestamps (one interpreter lock would couple them).
"""

from __future__ import annotations

import json
import os
import sys

from sparkcap.servers.sim.fleet import twin_profiles
from sparkcap.servers.sim.profile import SimProfile
from sparkcap.servers.sim.server import SimServer


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    spec = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if "profiles" in spec:
        profiles = [SimProfile(**p) for p in spec["profiles"]]
    else:
        profiles = twin_profiles(**spec)
    server = SimServer(profiles, port=port)
    info = json.dumps({"endpoint": server.endpoint, "port": server.port})
    ready = sys.argv[3] if len(sys.argv) > 3 else None
    if ready:  # written atomically, so the parent never reads half a line
        tmp = ready + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(info)
        os.replace(tmp, ready)
    else:
        print(info, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
