"""What goes first over budget (summarizers/dropping.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from summarizers.dropping import WORTH, Unit, _Weighing, drop


def weigh_every_unit(
    units: Sequence[Unit],
    excess: int,
    sizes: Mapping[str, int],
    headings: Mapping[str, int],
    kept: Collection[int],
    in_use: Collection[int],
) -> list[Unit]:
    """The rule as written: after every drop, weigh every unit left and drop the least
    worth per character (what :func:`drop`'s heap must reproduce)."""
    weighing = _Weighing(units, sizes, headings, in_use)
    while excess > 0 and weighing.lines > 1:
        spare = len(weighing.alive) > len(kept) + 1
        candidates = [
            p for p in weighing.alive if not (spare and p in kept) and not weighing.blocked(p)
        ]
        position = min(candidates, key=lambda p: (weighing.score(p), p))
        excess -= weighing.remove(position)
    return [units[p] for p in sorted(weighing.alive)]


_TEXTS = st.sampled_from(
    [
        '- "Cancel ORD-00001."',
        "- cancel_order(order_id=ORD-00001) -> ok",
        "status=processing",
        "total=$65.95",
        "flights=[(HAT190, 2024-05-23, $126); (HAT021, 2024-05-26, $148)]",
        'note="Leave it at the door"',
        "created_at=2024-05-08T11:24:52",
        "cabin=basic_economy",
        "IAH→SEA",
    ]
)


@st.composite
def unit_lists(draw: st.DrawFn) -> tuple[list[Unit], dict[str, int]]:
    units: list[Unit] = []
    sizes = dict.fromkeys(WORTH, 0)
    for section in draw(st.lists(st.sampled_from(list(WORTH)), max_size=12)):
        index = sizes[section]
        sizes[section] += 1
        if section in ("ledger", "options"):
            key = f"order ORD-{draw(st.integers(0, 3)):05d}"
            texts = draw(st.lists(_TEXTS, min_size=1, max_size=4))
            head = draw(st.booleans())
            for part, text in enumerate(texts):
                units.append(Unit(section, index, text, key=key, head=head and part == 0))
        else:
            units.append(Unit(section, index, draw(_TEXTS)))
    return units, sizes


@settings(max_examples=300, deadline=None)
@given(
    drawn=unit_lists(),
    excess=st.integers(1, 600),
    picks=st.sets(st.integers(0, 40), max_size=4),
    named=st.sets(st.integers(0, 40), max_size=6),
)
def test_the_heap_drops_exactly_what_weighing_every_unit_each_time_drops(
    drawn: tuple[list[Unit], dict[str, int]], excess: int, picks: set[int], named: set[int]
) -> None:
    units, sizes = drawn
    headings = {name: 10 for name in WORTH}
    kept = {p for p in picks if p < len(units)}
    in_use = {p for p in named if p < len(units)}
    assert drop(
        units, excess, sizes=sizes, headings=headings, kept=kept, in_use=in_use
    ) == weigh_every_unit(units, excess, sizes, headings, kept, in_use)
