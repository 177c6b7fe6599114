"""Record mode: a proxy in front of a real upstream that writes what it saw as a dsh v0 session tree.

`proxy` forwards and streams; `tree` owns the sessions, lineage and logs; `events` maps one call to
its rows; `call` is what the proxy saw of a call; `redact` masks secrets; `run` starts it all.
"""

from __future__ import annotations

from mockllm.recorder.run import RecordOptions, RunningRecorder, record_forever, start_recorder

__all__ = ["RecordOptions", "RunningRecorder", "record_forever", "start_recorder"]
