"""``python -m hub``: the hub process; the same command as ``mailrun hub``.

``mailrun up`` starts the hub this way, so the hub's argv holds ``hub`` as a
word of its own: that is how operators and supervisors find it.
"""

from .cli import hub_cmd, main

if __name__ == "__main__":
    hub_cmd.main(prog_name="python -m hub", **main.context_settings)
