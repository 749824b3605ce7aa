"""The wire format's tests (runtime/wire): codec, golden files, limits, decoders under fuzz."""
