"""Layers: stores that wrap another store and change what passes through."""
