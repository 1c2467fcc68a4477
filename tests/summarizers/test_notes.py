"""Bounding a summary's sections (summarizers/notes.py)."""

from __future__ import annotations

from summarizers.ledger import Entry
from summarizers.notes import Notes


def test_over_budget_an_owners_list_leaves_to_each_records_entry_what_it_states() -> None:
    order = Entry("order ORD-11404", 'status=shipped, total=$329.49, note="Leave at the door"')
    customer = Entry(
        "customer cus_672110",
        "name=Liam Novak, orders=[(ORD-11404, placed_on=2024-03-13, total=$329.49); "
        "(ORD-50184, placed_on=2024-03-11, total=$71.89)]",
    )
    notes = Notes(requests=['"Where is my order?"'], ledger=[order, customer])
    full = notes.render()
    body = notes.bound(len(full) - 35)
    assert len(body) <= len(full) - 35
    assert "- order ORD-11404: status=shipped, total=$329.49" in body  # shortened: no note
    assert (
        "orders=[(ORD-11404, placed_on=2024-03-13); (ORD-50184, placed_on=2024-03-11, "
        "total=$71.89)]" in body
    )  # the order's own entry says its total; every fact is still in the body
    assert "(older lines omitted)" not in body
