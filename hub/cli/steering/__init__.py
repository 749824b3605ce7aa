"""Commands that steer runs and deployments from outside: ``resume``,
``parked`` and ``retry`` for handlers that keep failing, ``cancel``,
``pause`` and ``unpause``, a deployment's schedules (``schedule``); and the
run settings ``mailrun deploy`` takes (its failure policy, its concurrency,
its mail settings)."""

from .control import COMMANDS as CONTROL_COMMANDS
from .failures import COMMANDS as FAILURE_COMMANDS
from .mail import mail_options as mail_options
from .mail import mail_settings as mail_settings
from .policy import policy_options as policy_options
from .policy import policy_settings as policy_settings
from .schedules import COMMANDS as SCHEDULE_COMMANDS

COMMANDS = (*FAILURE_COMMANDS, *CONTROL_COMMANDS, *SCHEDULE_COMMANDS)
"""Every command of this room, in the order ``mailrun --help`` lists them."""

__all__ = ["COMMANDS", "mail_options", "mail_settings", "policy_options", "policy_settings"]
