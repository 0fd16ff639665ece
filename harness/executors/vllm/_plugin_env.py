"""The setting that asks for the suite's vLLM platform plugin (``platform``):
here, so that the adapter names it without importing the plugin, which imports
vLLM's CPU platform."""

from __future__ import annotations

#: Set to 1 (by the adapter) to make the plugin pick its platform.
ENABLE_ENV = "HARNESS_VLLM_RAY_PLATFORM"
