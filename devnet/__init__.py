"""A local network for the demo and the tests (docs/architecture.md §1): provider sites started
side by side on one machine (`network.py`) and the demo's orchestration (`demo.py`). No
production package imports it."""
