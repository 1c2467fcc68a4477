"""The made-up shop of the generated agent traffic (:mod:`benchmarks.traffic`): customers'
names and cities, the catalogue, carriers, card brands, return reasons, the day it is, unique
ids, and how the shop writes amounts and dates."""

from __future__ import annotations

import random
from datetime import date
from typing import Final

__all__ = [
    "BRANDS",
    "CARRIERS",
    "CITIES",
    "FIRST",
    "LAST",
    "PRODUCTS",
    "REASONS",
    "STREETS",
    "TODAY",
    "Ids",
    "day",
    "describe",
    "money",
    "spoken",
]

FIRST: Final = ("Ava", "Noah", "Mia", "Liam", "Zoe", "Ethan", "Ivy", "Lucas", "Nora", "Omar")
LAST: Final = ("Patel", "Garcia", "Kim", "Okafor", "Novak", "Silva", "Chen", "Haddad", "Berg")
CITIES: Final = (
    ("Denver", "CO", "80202"),
    ("Austin", "TX", "73301"),
    ("Portland", "OR", "97201"),
    ("Madison", "WI", "53703"),
    ("Boise", "ID", "83702"),
    ("Raleigh", "NC", "27601"),
)
STREETS: Final = ("Maple Ave", "Cedar St", "Lakeview Dr", "Hillcrest Rd", "Elm Ct", "Pine Way")
PRODUCTS: Final = (
    ("Trail running shoes", 89.99, "shoes"),
    ("Ultralight rain jacket", 149.0, "jacket"),
    ("2-person backpacking tent", 239.5, "tent"),
    ("Insulated water bottle 1 l", 24.95, "bottle"),
    ("Merino wool socks (3 pairs)", 32.0, "socks"),
    ("Down sleeping bag -7 C", 289.0, "sleeping bag"),
    ("Headlamp 400 lumen", 39.99, "headlamp"),
    ("Trekking poles, carbon", 119.0, "poles"),
    ("Camp stove with igniter", 64.5, "stove"),
    ("Daypack 28 l", 79.0, "daypack"),
    ("Fleece pullover", 59.0, "fleece"),
    ("Hiking boots, waterproof", 179.0, "boots"),
)
CARRIERS: Final = ("UPS", "FedEx", "USPS")
BRANDS: Final = ("visa", "mastercard", "amex")
REASONS: Final = ("too small", "arrived damaged", "not as described", "changed my mind")
TODAY: Final = date(2024, 3, 20)


class Ids:
    """Unique ids of every kind, drawn from one random source."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def make(self, pattern: str) -> str:
        # pattern: # a digit, @ a capital letter, anything else literal.
        while True:
            value = "".join(
                str(self.rng.randrange(10))
                if c == "#"
                else chr(65 + self.rng.randrange(26))
                if c == "@"
                else c
                for c in pattern
            )
            if value not in self.used:
                self.used.add(value)
                return value


def describe(product: str) -> str:
    return (
        f"{product}. Designed for multi-day trips in changing weather; recycled materials, "
        "field-tested by our guides, 2-year warranty, free repairs in the first year."
    )


def money(value: float) -> str:
    return f"${value:,.2f}"


def day(value: date) -> str:
    return value.isoformat()


def spoken(value: date) -> str:
    return f"{value.strftime('%B')} {value.day}"
