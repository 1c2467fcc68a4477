"""Base stores: where the raw record lives."""
