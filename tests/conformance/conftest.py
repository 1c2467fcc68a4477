"""The conformance suite is the kit of ``storage.testing`` over every built-in store
(test_conformance.py); the server fixtures come from tests/servers.py (tests/conftest.py)."""
