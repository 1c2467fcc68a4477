"""The store's SQL names: one schema, one messages table and the tables beside it.

Every object is named after the messages table (``chatlayers_messages``), so two stores with
different ``table`` options never share anything: ``<table>_keys``, ``<table>_sessions``,
``<table>_checkpoints``, ``<table>_leases``, ``<table>_records``, ``<table>_version``, and the
functions ``<table>_save``, ``<table>_delete``, ... A suffix is at most 15 bytes, so a table
name of up to 48 bytes keeps every name within PostgreSQL's 63.
"""

from __future__ import annotations

from typing import Final

import attrs

from storage.errors import InvalidArgumentError

__all__ = ["MAX_NAME", "Names", "check_name", "ident"]

MAX_NAME: Final = 48  # bytes

# Suffix -> placeholder used in the SQL text of migrations and statements.
_SUFFIXES: Final = {
    "keys": "_keys",
    "sessions": "_sessions",
    "checkpoints": "_checkpoints",
    "leases": "_leases",
    "records": "_records",
    "rewinds": "_rewinds",
    "rewound": "_rewound",
    "versions_cp": "_cp_versions",
    "version": "_version",
    "f_lock": "_lock_key",
    "f_save": "_save",
    "f_record": "_save_record",
    "f_refresh": "_refresh",
    "f_delete": "_delete",
    "f_delete_user": "_delete_user",
    "f_purge": "_purge",
}
_INDEXES: Final = {
    "by_key": "_by_key",
    "by_id": "_by_id",
    "by_time": "_by_time",
    "fts": "_fts",
    "sessions_last": "_sessions_last",
    "records_by_id": "_records_by_id",
    "records_by_seq": "_records_by_seq",
}


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def check_name(name: object) -> str:
    """A schema or table name the store can use.

    Raises:
        InvalidArgumentError: not a non-empty str of at most 48 bytes without NUL.
    """
    if (
        not isinstance(name, str)
        or not name
        or "\x00" in name
        or len(name.encode("utf-8", "replace")) > MAX_NAME
    ):
        raise InvalidArgumentError(
            f"must be a non-empty str of at most {MAX_NAME} bytes without NUL, got {name!r}"
        )
    return name


@attrs.frozen(slots=True)
class Names:
    """Qualified names of one store's objects, and the mapping SQL templates format with."""

    schema: str
    table: str

    @property
    def messages(self) -> str:
        return f"{ident(self.schema)}.{ident(self.table)}"

    def qualified(self, what: str) -> str:
        """``"schema"."<table><suffix>"`` for a table or function placeholder name."""
        return f"{ident(self.schema)}.{ident(self.table + _SUFFIXES[what])}"

    def template(self) -> dict[str, str]:
        """``{t}``, ``{keys}``, ..., ``{by_key}``, ...: what SQL templates are formatted with
        (index names are unqualified: an index lives in its table's schema)."""
        out = {"t": self.messages, "schema": ident(self.schema)}
        out.update({what: self.qualified(what) for what in _SUFFIXES})
        out.update({what: ident(self.table + suffix) for what, suffix in _INDEXES.items()})
        return out
