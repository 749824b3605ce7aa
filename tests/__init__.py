"""The tests mirror the code: tests/runtime, tests/hub/<room>, tests/sidecar
test one package each; tests/e2e drives real processes (and checks the wire
between versions); tests/faults injects faults, with its tools' own tests.
Helpers for all of them are in tests/support."""
