"""The actor kernel: actors with bounded mailboxes, tell and ask (their
timeouts on one timer per actor), and a supervisor that restarts a crashed
actor within a budget."""

from ._actor import Actor as Actor
from ._actor import ActorRef as ActorRef
from ._actor import RestartPolicy as RestartPolicy
from ._actor import Supervisor as Supervisor
from ._mailbox import Mailbox as Mailbox

__all__ = [
    "Actor",
    "ActorRef",
    "Mailbox",
    "RestartPolicy",
    "Supervisor",
]
