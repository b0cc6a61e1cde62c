"""What the benchmark modules share."""

import json
import time
import uuid

# A body the size of a framework-m message with one small kwarg.
BODY = json.dumps(
    {
        "v": 1,
        "id": uuid.uuid4().hex,
        "job": "noop",
        "enqueued_at": time.time(),
        "scheduled_at": None,
        "dedup_id": "bench:000000000000000000000000:00000",
        "kwargs": {"i": 0},
    }
).encode()
