"""Scripts that print the perf tier's figures (docs/perf.md, docs/ci.md): run by hand, not collected as tests."""
