"""Backends written to be read: ``examples.pipes`` (docs/implementers.md, section 1)."""
