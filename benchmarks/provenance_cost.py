"""What view provenance costs on disk: bytes per assistant reply and per message, in SQLite.

    python -m benchmarks.provenance_cost [FILE ...] [--url URL_TEMPLATE]

Replays the conversation files (default: every ``examples/data/*.openai.jsonl``) with
``chatlayers replay`` (a fetch before each reply, as an orchestrator) through a summarizing
SQLite stack (default the replay stack, ``summarize::scrub::sqlite``) into a fresh
database, then reads SQLite's own page accounting (the ``dbstat`` table) and the rows:

- provenance records: one ``chatlayers.provenance`` record per reply answered after a fetch
  (the ``records`` table and its two indexes; no other record is written by a replay);
- checkpoint versions kept for provenance: every ``checkpoint_versions`` row but each key's
  current one (which ``checkpoints`` holds anyway);
- the messages themselves (``messages``, its indexes and the search index), for scale.

``payload`` is the bytes of the rows' values (what SQLite stores before page overhead);
``on disk`` the pages the table and its indexes fill (``pgsize``). Prints markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sqlite3
import sys
import tempfile
from pathlib import Path

from storage.cli import main as chatlayers
from storage.cli.replay import REPLAY_URL
from storage.codec import decode

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"
_PROVENANCE = ("records", "records_by_id", "records_by_key")
_MESSAGES = ("messages", "messages_by_key", "messages_by_id")


def _pages(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """Table or index name -> (bytes of pages, bytes of payload)."""
    rows = conn.execute("SELECT name, sum(pgsize), sum(payload) FROM dbstat GROUP BY name")
    return {name: (int(size), int(payload)) for name, size, payload in rows}


def measure(files: list[str], url_template: str) -> dict[str, float]:
    """Replay ``files`` into a fresh database through ``url_template`` (``{db}``: its path)
    and return the figures (see the module)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "provenance.db"
        with contextlib.redirect_stdout(io.StringIO()):
            code = chatlayers(["replay", *files, "--url", url_template.format(db=db), "--json"])
        if code:
            raise SystemExit(f"chatlayers replay failed with exit status {code}")
        conn = sqlite3.connect(db)
        try:
            pages = _pages(conn)
            kinds = {k for (k,) in conn.execute("SELECT DISTINCT kind FROM records")}
            if kinds - {"chatlayers.provenance"}:
                raise SystemExit(f"records other than provenance in the replay: {kinds}")
            (messages,) = conn.execute("SELECT count(*) FROM messages").fetchone()
            replies = sum(
                decode(record).role == "assistant"
                for (record,) in conn.execute("SELECT record FROM messages")
            )
            (linked,) = conn.execute("SELECT count(*) FROM records").fetchone()
            (old_versions, old_bytes) = conn.execute(
                "SELECT count(*), coalesce(sum(length(v.records) + length(v.epoch) + "
                "length(v.summarizer) + 24), 0) FROM checkpoint_versions v JOIN conversations c "
                "USING (user_id, session_id, agent_id) WHERE v.version < c.checkpoint_version"
            ).fetchone()
            (version_rows,) = conn.execute("SELECT count(*) FROM checkpoint_versions").fetchone()
        finally:
            conn.close()
    provenance_disk = sum(pages.get(n, (0, 0))[0] for n in _PROVENANCE)
    provenance_payload = sum(pages.get(n, (0, 0))[1] for n in _PROVENANCE)
    versions_disk = pages.get("checkpoint_versions", (0, 0))[0]
    message_disk = sum(pages.get(n, (0, 0))[0] for n in _MESSAGES)
    message_payload = sum(pages.get(n, (0, 0))[1] for n in _MESSAGES)
    return {
        "messages": messages,
        "assistant replies": replies,
        "replies with provenance": linked,
        "provenance payload bytes": provenance_payload,
        "provenance on-disk bytes": provenance_disk,
        "checkpoint versions kept (not current)": old_versions,
        "their payload bytes": old_bytes,
        "checkpoint_versions on-disk bytes (all rows)": versions_disk,
        "checkpoint_versions rows": version_rows,
        "message payload bytes": message_payload,
        "message on-disk bytes": message_disk,
    }


def report(figures: dict[str, float]) -> str:
    replies = figures["assistant replies"] or 1
    messages = figures["messages"] or 1
    payload = figures["provenance payload bytes"]
    disk = figures["provenance on-disk bytes"]
    versions = figures["their payload bytes"]
    lines = ["| measure | value |", "|---|---:|"]
    lines += [f"| {name} | {value:,.0f} |" for name, value in figures.items()]
    lines += [
        f"| provenance records, payload per reply | {payload / replies:,.1f} B |",
        f"| provenance records, on disk per reply | {disk / replies:,.1f} B |",
        f"| provenance records, on disk per message | {disk / messages:,.1f} B |",
        f"| older checkpoint versions, payload per message | {versions / messages:,.1f} B |",
        f"| provenance records vs message payload | "
        f"{100 * payload / max(figures['message payload bytes'], 1):.1f} % |",
    ]
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.provenance_cost")
    parser.add_argument("files", nargs="*", help="conversation files (default: examples/data)")
    parser.add_argument(
        "--url",
        default=REPLAY_URL.replace("sqlite:///chatlayers.db", "sqlite:///{db}"),
        help="stack URL with {db} for the database path (default: the replay stack)",
    )
    args = parser.parse_args(argv)
    files = args.files or sorted(str(p) for p in DATA.glob("*.openai.jsonl"))
    print(f"stack: {args.url}; files: {', '.join(Path(f).name for f in files)}\n")
    print(report(measure(files, args.url)))


if __name__ == "__main__":
    run(sys.argv[1:])
