"""Bounding a summary's sections (summarizers/notes.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from summarizers.ledger import Entry, split_parts
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


RESERVATION = Entry(
    "reservation 4NQLHD",
    "IAH→SEA, cabin=economy, flights=[(IAH→LAS, HAT190, 2024-05-23, $126); "
    "(SEA→JFK, HAT021, 2024-05-26, $148); (JFK→IAH, HAT279, 2024-05-27, $114)], "
    "passengers=[(Liam Khan, dob=1979-09-27); (James Kim, dob=1956-07-08)], "
    "created_at=2024-05-08T11:24:52",
)


def flight(number: str, day: int) -> Entry:
    """A flight read while searching: long, and every fact it states its own."""
    return Entry(
        f"flight {number} 2024-05-{day}",
        f"IAH→LAS, status=available, available_seats=(economy={day}, business={day + 1}), "
        f"prices=(basic_economy=${day + 40}, economy=${day + 100}, business=${day + 300})",
    )


def test_over_budget_a_long_entry_loses_parts_before_its_line_goes() -> None:
    """tau-bench task 17: the reservation to change was read first, then flights were
    searched; over budget the reservation lost its whole line, and with it the return
    flights the change must keep. Parts go now, the least worth per character first: its
    passengers' birth dates leave, its flights and cabin stay, the key with them."""
    notes = Notes(
        requests=['"Change my flight from IAH to SEA to May 24th."'], ledger=[RESERVATION]
    )
    budget = len(notes.render()) - 40
    body = notes.bound(budget)
    assert len(body) <= budget
    line = next(line for line in body.splitlines() if line.startswith("- reservation 4NQLHD: "))
    assert "cabin=economy" in line
    assert "HAT021, 2024-05-26" in line
    assert "HAT279, 2024-05-27" in line
    assert "passengers=" not in line  # 2 dates in 62 characters: the least worth
    assert "created_at=2024-05-08T11:24:52" in line


def test_over_budget_searched_flights_lose_parts_while_the_reservation_keeps_its_flights() -> None:
    notes = Notes(
        requests=['"Change my flight from IAH to SEA to May 24th."'],
        ledger=[RESERVATION, *(flight(f"HAT{n}", 24 + n % 3) for n in range(100, 106))],
    )
    budget = len(notes.render()) - 300
    body = notes.bound(budget)
    assert len(body) <= budget
    assert "HAT021, 2024-05-26" in body
    assert "HAT279, 2024-05-27" in body
    assert "cabin=economy" in body
    assert body.count("- flight HAT") >= 4  # shortened, not all dropped


def test_an_entry_whose_last_part_goes_takes_its_key_with_it() -> None:
    """Dropping parts never leaves a bare key behind: when nothing of an entry is worth its
    room, the whole line goes, as before."""
    notes = Notes(
        requests=['"Where is my order?"'],
        ledger=[flight(f"HAT{n}", 20 + n) for n in range(8)],
    )
    body = notes.bound(300)
    assert len(body) <= 300
    for line in body.splitlines():
        if line.startswith("- flight "):
            assert line.partition(": ")[2], line  # an entry keeps some text or goes
    assert body.count("- flight ") < 8


def test_over_budget_a_state_outlasts_a_longer_part_with_one_fact() -> None:
    """A short plain value (``status=processing``) holds no id, amount or date, yet it is
    what the order can still do (be cancelled): it weighs half a fact of its own, more per
    character than a 44-character note with one date (without that, it would go first)."""
    order = Entry(
        "order ORD-79886",
        'status=processing, total=$65.95, carrier_note="handed to the courier on 2024-03-02"',
    )
    notes = Notes(requests=['"Cancel ORD-79886."'], ledger=[order])
    body = notes.bound(len(notes.render()) - 10)
    assert "- order ORD-79886: status=processing, total=$65.95" in body
    assert "carrier_note" not in body


_PARTS = st.sampled_from(
    [
        "status=processing",
        "total=$65.95",
        "cabin=basic_economy",
        "flights=[(IAH→LAS, HAT190, 2024-05-23, $126); (SEA→JFK, HAT021, 2024-05-26, $148)]",
        "passengers=[(Liam Khan, dob=1979-09-27)]",
        'note="Leave the parcel at the door, please"',
        "created_at=2024-05-08T11:24:52",
        "IAH→SEA",
    ]
)
_ENTRIES = st.lists(
    st.builds(
        lambda n, parts: Entry(f"order ORD-{n:05d}", ", ".join(parts)),
        st.integers(0, 99_999),
        st.lists(_PARTS, min_size=1, max_size=6, unique=True),
    ),
    max_size=8,
    unique_by=lambda e: e.key,
)


@settings(max_examples=200, deadline=None)
@given(
    ledger=_ENTRIES,
    requests=st.lists(st.sampled_from(['"Cancel it."', '"Where is ORD-00001?"']), max_size=3),
    done=st.lists(st.sampled_from(["cancel_order(order_id=ORD-00001) -> ok"]), max_size=2),
    max_chars=st.integers(100, 900),
)
def test_bounded_entries_keep_their_key_and_a_subset_of_their_parts_in_order(
    ledger: list[Entry], requests: list[str], done: list[str], max_chars: int
) -> None:
    """Whatever is dropped: the body fits, each ledger line is an entry's key with some of
    its parts (or, shortened, their facts) in their order, never a bare key, never twice."""
    original = {e.key: e.text for e in ledger}
    notes = Notes(requests=list(dict.fromkeys(requests)), done=done, ledger=list(ledger))
    body = notes.bound(max_chars)
    assert len(body) <= max_chars
    ledger_lines = [e.line for e in notes.ledger]
    assert len({e.key for e in notes.ledger}) == len(notes.ledger)
    for entry, line in zip(notes.ledger, ledger_lines, strict=True):
        assert entry.key in original
        assert entry.text, line
        if "…" in body:  # cut as a last resort: only what fits is checked
            continue
        assert line in body
        position = 0
        for part in split_parts(entry.text, ", "):
            found = original[entry.key].find(part.split("=")[0], position)
            assert found >= position, (part, original[entry.key])
            position = found


def test_over_budget_an_entry_keeps_what_it_is_while_any_part_of_it_stays() -> None:
    """A route (or a name) first in an entry says what the record is: it goes with the
    entry's last part, never leaving ``flight HAT083: scheduled_time_est=01:00→07:00``
    (trial finding: options without their route)."""
    options = [
        Entry(
            f"flight HAT0{n}0 2024-05-20",
            f"JFK→SEA, scheduled_time_est=0{n}:00→07:00, prices=(economy=${100 + n})",
            listed=True,
        )
        for n in range(8)
    ]
    notes = Notes(requests=['"Find me a flight to SEA."'], options=options)
    for budget in range(150, len(notes.render()), 25):
        trial = Notes(requests=list(notes.requests), options=list(options))
        body = trial.bound(budget)
        assert len(body) <= budget
        for line in body.splitlines():
            if line.startswith("- flight "):
                assert line.partition(": ")[2].startswith("JFK→SEA"), (budget, line)
