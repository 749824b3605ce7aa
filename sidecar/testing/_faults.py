"""Injected step failures (``WorkflowTest.fail_step``): the mapping the
run actors read (``RunsConfig.step_faults``), each fault spent after the
number of calls it was given."""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class StepFaults(Mapping[str, BaseException]):
    """Step name -> the error its next calls raise instead of calling the
    function; a fault given ``times`` is gone after that many calls."""

    def __init__(self) -> None:
        self._faults: dict[str, tuple[BaseException, int | None]] = {}

    def add(self, name: str, error: BaseException, times: int | None = None) -> None:
        if times is not None and times < 1:
            raise ValueError(f"times is 1 or more (None: every call), not {times!r}")
        self._faults[name] = (error, times)

    def clear(self, name: str | None = None) -> None:
        if name is None:
            self._faults.clear()
        else:
            self._faults.pop(name, None)

    def __getitem__(self, name: str) -> BaseException:
        # Looked up once per call of the step (each retry too): that is a use.
        error, times = self._faults[name]
        if times is not None:
            if times <= 1:
                del self._faults[name]
            else:
                self._faults[name] = (error, times - 1)
        return error

    def __iter__(self) -> Iterator[str]:
        return iter(self._faults)

    def __len__(self) -> int:
        return len(self._faults)
