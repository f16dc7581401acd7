"""The filesystem broker of the embedded default, with each message whole before a worker
can take it.

Kombu's filesystem transport creates a message's file, then locks and writes it; its
consumers take files by listing the folder and read them without a lock. A worker that
lists the folder between the two takes the empty file, fails to decode it and the
message is gone: on a loaded machine, a run that never arrives. This transport writes
each message under a name no consumer looks for and renames it into place, which is
atomic on one file system, so a consumer finds a message whole or not at all.

Use it in the app's module::

    bridge.folder_broker.use(app, "broker")
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from celery import Celery
from kombu.transport import filesystem
from kombu.utils.json import dumps

#: The transport, as Celery's ``broker_transport`` names it.
TRANSPORT = "bridge.folder_broker:Transport"


class Channel(filesystem.Channel):
    # kombu names the second argument `message` in its base class and `payload` here.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Put a message on ``queue``, named as kombu names it (its time first, so that
        consumers take messages in order), written whole before it takes that name."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        # A dot first: kombu's consumers take only names whose part after the first dot
        # is the queue's, which this one's is not.
        partial = os.path.join(self.data_folder_out, f".{name}.partial")
        with open(partial, "wb") as file:
            file.write(str(dumps(payload)).encode())  # type: ignore[no-untyped-call]
        os.replace(partial, os.path.join(self.data_folder_out, name))


class Transport(filesystem.Transport):
    Channel = Channel

    @property
    def default_connection_params(self) -> dict[str, Any]:
        """No host: kombu's virtual transports default to ``localhost``, and a connection
        to ``filesystem://`` logs a warning that it reverted to it, which means nothing
        for a folder."""
        return {}


def use(app: Celery, folder: str | os.PathLike[str], polling_interval: float = 0.2) -> None:
    """Send ``app``'s messages through ``folder`` (created if missing): its ``queue``
    folder holds the messages, its ``control`` folder the fanout exchanges that events
    and remote control use. Every process of the app must see the same folder."""
    root = Path(folder)
    for sub in ("queue", "control"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    app.conf.broker_url = "filesystem://"
    app.conf.broker_transport = TRANSPORT
    app.conf.broker_transport_options = {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "control_folder": str(root / "control"),
        "polling_interval": polling_interval,
    }
