"""Generated agent traffic: long, tool-using support conversations full of ids, amounts, dates.

``python -m benchmarks.traffic OUT.jsonl [--conversations N] [--seed S]`` writes them in the
conversation file format ``chatlayers replay`` and ``chatlayers eval`` read.

Each conversation is a shop's support agent helping one customer: it looks the customer up,
lists their orders, opens some, starts returns, refunds to a card, searches products, places
and cancels orders, applies coupons, and changes shipping addresses; the tools answer in JSON.
Between the tasks the customer asks about things said long before ("what was the tracking
number of the first order again?") and the agent answers from the conversation, not from a
tool, and at the end it recaps everything that changed: the next message needs facts from far
back, which is what a summary has to keep. Deterministic for a seed; no two conversations
share their ids.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Final

__all__ = ["SYSTEM_PROMPT", "conversation", "conversations", "write_conversations"]

SYSTEM_PROMPT: Final = """\
# Support agent policy (Northwind Outfitters)

You are the support agent of Northwind Outfitters, an online outdoor-gear shop. The current \
date is 2024-03-20.

- Identify the customer first: ask for the email address of their account and look it up \
with find_customer. Never act on an order that belongs to another customer.
- Before any action that changes an order (a return, a refund, a cancellation, an address \
change, a new order), list what you will do and get an explicit "yes" from the customer.
- Returns are possible within 30 days of delivery for unused items; the refund goes to the \
original payment method unless the customer names another card on file.
- A shipped order cannot be cancelled; offer a return instead. An order that is still \
processing can be cancelled and is refunded in full.
- Coupons: one per order, applied before shipping; SPRING15 gives 15 % off orders over $100.
- Shipping is free over $75; otherwise it costs $6.95. Express shipping costs $14.
- Make one tool call at a time and answer the customer only after it returned.
- Quote ids, amounts and dates exactly as the tools return them.
"""

_FIRST: Final = ("Ava", "Noah", "Mia", "Liam", "Zoe", "Ethan", "Ivy", "Lucas", "Nora", "Omar")
_LAST: Final = ("Patel", "Garcia", "Kim", "Okafor", "Novak", "Silva", "Chen", "Haddad", "Berg")
_CITIES: Final = (
    ("Denver", "CO", "80202"),
    ("Austin", "TX", "73301"),
    ("Portland", "OR", "97201"),
    ("Madison", "WI", "53703"),
    ("Boise", "ID", "83702"),
    ("Raleigh", "NC", "27601"),
)
_STREETS: Final = ("Maple Ave", "Cedar St", "Lakeview Dr", "Hillcrest Rd", "Elm Ct", "Pine Way")
_PRODUCTS: Final = (
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
_CARRIERS: Final = ("UPS", "FedEx", "USPS")
_BRANDS: Final = ("visa", "mastercard", "amex")
_REASONS: Final = ("too small", "arrived damaged", "not as described", "changed my mind")
_TODAY: Final = date(2024, 3, 20)


class _Ids:
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


def _describe(product: str) -> str:
    return (
        f"{product}. Designed for multi-day trips in changing weather; recycled materials, "
        "field-tested by our guides, 2-year warranty, free repairs in the first year."
    )


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _day(value: date) -> str:
    return value.isoformat()


def _spoken(value: date) -> str:
    return f"{value.strftime('%B')} {value.day}"


class _Conversation:
    """Builds one conversation message by message."""

    def __init__(self, index: int, seed: int) -> None:
        self.rng = random.Random(seed * 100_003 + index)
        self.ids = _Ids(self.rng)
        self.index = index
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        self.calls = 0
        first, last = self.rng.choice(_FIRST), self.rng.choice(_LAST)
        self.name = f"{first} {last}"
        self.email = f"{first.lower()}.{last.lower()}{self.rng.randrange(10, 99)}@example.com"
        self.customer_id = self.ids.make("cus_######")
        city, state, zip_code = self.rng.choice(_CITIES)
        self.address = f"{self.rng.randrange(10, 999)} {self.rng.choice(_STREETS)}, {city}, {state}"
        self.zip = zip_code
        self.cards = [
            {"id": self.ids.make("pm_########"), "brand": brand, "last4": self.ids.make("####")}
            for brand in self.rng.sample(_BRANDS, 2)
        ]
        self.orders = [self._order(i) for i in range(self.rng.randrange(6, 10))]
        self.done: list[str] = []  # what changed, for the recap

    # --- data --------------------------------------------------------------------------

    def _order(self, number: int) -> dict[str, Any]:
        placed = _TODAY - timedelta(days=self.rng.randrange(3, 40))
        items: list[dict[str, Any]] = []
        for name, price, _ in self.rng.sample(_PRODUCTS, self.rng.randrange(1, 4)):
            items.append(
                {
                    "sku": self.ids.make("SKU-####"),
                    "name": name,
                    "qty": 1,
                    "price": price,
                    "color": self.rng.choice(("black", "forest green", "slate", "ochre")),
                    "size": self.rng.choice(("S", "M", "L", "XL", "one size")),
                    "description": _describe(name),
                }
            )
        subtotal = round(sum(i["price"] for i in items), 2)
        shipping = 0.0 if subtotal >= 75 else 6.95
        status = self.rng.choice(("delivered", "delivered", "shipped", "processing"))
        order: dict[str, Any] = {
            "order_id": self.ids.make("ORD-#####"),
            "customer_id": self.customer_id,
            "placed_on": _day(placed),
            "status": status,
            "items": items,
            "shipping_cost": shipping,
            "total": round(subtotal + shipping, 2),
            "payment_id": self.rng.choice(self.cards)["id"],
        }
        order["ship_to"] = {"name": self.name, "line1": self.address, "zip": self.zip}
        if status != "processing":
            days = self.rng.randrange(3, 8)
            carrier = self.rng.choice(_CARRIERS)
            order["shipment"] = {
                "carrier": carrier,
                "tracking": self.ids.make("1Z@@@###########"),
                "delivered_on" if status == "delivered" else "eta": _day(
                    placed + timedelta(days=days)
                ),
                "events": [
                    {
                        "at": f"{_day(placed + timedelta(days=d))}T{self.rng.randrange(6, 22):02d}:"
                        f"{self.rng.randrange(60):02d}:00",
                        "status": event,
                        "location": f"{self.rng.choice(_CITIES)[0]} {carrier} facility",
                    }
                    for d, event in enumerate(
                        ("label created", "picked up", "in transit", "out for delivery")[
                            : min(days, 4)
                        ]
                    )
                ],
            }
        return order

    # --- messages ----------------------------------------------------------------------

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def tool(self, name: str, arguments: dict[str, Any], result: Any) -> None:
        self.calls += 1
        call_id = f"call_{self.index}_{self.calls}"
        self.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
        )
        content = result if isinstance(result, str) else json.dumps(result)
        self.messages.append(
            {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
        )

    # --- tasks -------------------------------------------------------------------------

    def identify(self) -> None:
        self.user(f"Hi, I need some help with my orders. My email is {self.email}.")
        cards = [
            {"id": c["id"], "brand": c["brand"], "last4": c["last4"], "expires": "2027-08"}
            for c in self.cards
        ]
        self.tool(
            "find_customer",
            {"email": self.email},
            {
                "customer_id": self.customer_id,
                "name": self.name,
                "email": self.email,
                "tier": self.rng.choice(("regular", "silver", "gold")),
                "address": {"line1": self.address, "zip": self.zip, "country": "US"},
                "payment_methods": cards,
                "member_since": "2019-06-11",
            },
        )
        self.say(
            f"Thanks, {self.name.split()[0]}! I found your account ({self.customer_id}). "
            "What can I do for you today?"
        )

    def list_orders(self) -> None:
        self.user("Can you show me my recent orders?")
        rows = [
            {k: o[k] for k in ("order_id", "placed_on", "status", "total")} for o in self.orders
        ]
        self.tool("list_orders", {"customer_id": self.customer_id}, {"orders": rows})
        dates = ", ".join(_spoken(date.fromisoformat(o["placed_on"])) for o in self.orders)
        self.say(f"You have {len(self.orders)} recent orders, placed on {dates}.")

    def open_order(self, order: dict[str, Any]) -> None:
        placed = _spoken(date.fromisoformat(order["placed_on"]))
        self.user(f"What's the status of the order from {placed}?")
        self.tool(
            "get_order", {"customer_id": self.customer_id, "order_id": order["order_id"]}, order
        )
        shipment = order.get("shipment")
        items = ", ".join(i["name"].lower() for i in order["items"])
        if shipment is None:
            text = f"That order ({items}) is still processing; it has not shipped yet."
        else:
            when = _spoken(date.fromisoformat(shipment.get("delivered_on") or shipment["eta"]))
            verb = "was delivered on" if "delivered_on" in shipment else "should arrive by"
            text = f"That order ({items}) shipped with {shipment['carrier']} and {verb} {when}."
        self.say(text)

    def start_return(self, order: dict[str, Any]) -> None:
        item = self.rng.choice(order["items"])
        reason = self.rng.choice(_REASONS)
        short = next(p[2] for p in _PRODUCTS if p[0] == item["name"])
        placed = _spoken(date.fromisoformat(order["placed_on"]))
        self.user(f"I'd like to return the {short} from the order of {placed}, it's {reason}.")
        self.say(
            f"I can start a return for {item['name']} ({item['sku']}) from {order['order_id']}; "
            f"the refund would be {_money(item['price'])} to the original payment method. "
            "Shall I go ahead?"
        )
        self.user("Yes, please.")
        rma = self.ids.make("RMA-#####")
        self.tool(
            "create_return",
            {
                "customer_id": self.customer_id,
                "order_id": order["order_id"],
                "sku": item["sku"],
                "reason": reason,
            },
            {
                "return_id": rma,
                "order_id": order["order_id"],
                "sku": item["sku"],
                "status": "label_created",
                "refund_amount": item["price"],
                "drop_off_by": _day(_TODAY + timedelta(days=14)),
                "label_url": f"https://returns.example.com/{rma}.pdf",
            },
        )
        self.say(
            f"Done: return {rma} is open. Drop the parcel off by "
            f"{_spoken(_TODAY + timedelta(days=14))}; you'll get {_money(item['price'])} back."
        )
        self.done.append(f"return {rma} for {item['sku']} ({_money(item['price'])})")

    def refund(self, order: dict[str, Any]) -> None:
        card = self.cards[-1]
        amount = round(order["total"] * self.rng.choice((0.1, 0.2, 0.25)), 2)
        placed = _spoken(date.fromisoformat(order["placed_on"]))
        self.user(
            f"The order of {placed} arrived late. Could I get {_money(amount)} back as a "
            f"goodwill refund on my {card['brand']} card?"
        )
        refund_id = self.ids.make("re_@@@#####")
        self.tool(
            "issue_refund",
            {
                "customer_id": self.customer_id,
                "order_id": order["order_id"],
                "amount": amount,
                "payment_id": card["id"],
            },
            {
                "refund_id": refund_id,
                "status": "refunded",
                "amount": amount,
                "payment_id": card["id"],
                "expected_on": _day(_TODAY + timedelta(days=5)),
            },
        )
        self.say(
            f"Refund {refund_id} of {_money(amount)} to the {card['brand']} ending "
            f"{card['last4']} is done; expect it by {_spoken(_TODAY + timedelta(days=5))}."
        )
        self.done.append(f"refund {refund_id} ({_money(amount)})")

    def buy(self) -> dict[str, Any]:
        short = self.rng.choice(_PRODUCTS)[2]
        self.user(f"I also need a new {short}. What do you have?")
        found: list[dict[str, Any]] = []
        for product, price, _ in self.rng.sample(_PRODUCTS, 8):
            found.append(
                {
                    "sku": self.ids.make("SKU-####"),
                    "name": product,
                    "price": price,
                    "stock": self.rng.randrange(0, 40),
                    "rating": round(self.rng.uniform(3.2, 4.9), 1),
                    "description": _describe(product),
                    "colors": ["black", "slate", "ochre"][: self.rng.randrange(1, 4)],
                }
            )
        self.tool("search_products", {"query": short}, {"results": found})
        pick = self.rng.choice([p for p in found if p["stock"]] or found)
        options = "; ".join(f"{p['name']} ({p['sku']}) at {_money(p['price'])}" for p in found[:3])
        self.say(
            f"I found: {options}; and {pick['name']} ({pick['sku']}) at {_money(pick['price'])}."
        )
        card = self.cards[0]
        self.user(f"Let's order {pick['sku']}, paid with the card ending {card['last4']}.")
        order_id = self.ids.make("ORD-#####")
        shipping = 0.0 if pick["price"] >= 75 else 6.95
        total = round(pick["price"] + shipping, 2)
        eta = _TODAY + timedelta(days=self.rng.randrange(3, 7))
        self.tool(
            "place_order",
            {
                "customer_id": self.customer_id,
                "items": [{"sku": pick["sku"], "qty": 1}],
                "payment_id": card["id"],
            },
            {"order_id": order_id, "status": "processing", "total": total, "eta": _day(eta)},
        )
        self.say(
            f"Your order {order_id} is placed: {_money(total)} charged to the card ending "
            f"{card['last4']}, arriving around {_spoken(eta)}."
        )
        self.done.append(f"new order {order_id} ({_money(total)})")
        order = {"order_id": order_id, "total": total, "status": "processing", "items": [pick]}
        self.orders.append(order)
        return order

    def coupon(self, order: dict[str, Any]) -> None:
        self.user(f"Can I still use the coupon SPRING15 on {order['order_id']}?")
        discount = round(order["total"] * 0.15, 2)
        new_total = round(order["total"] - discount, 2)
        self.tool(
            "apply_coupon",
            {"order_id": order["order_id"], "code": "SPRING15"},
            {"code": "SPRING15", "discount": discount, "new_total": new_total},
        )
        self.say(f"Applied: {_money(discount)} off, the new total is {_money(new_total)}.")
        order["total"] = new_total
        self.done.append(f"coupon SPRING15 on {order['order_id']} (now {_money(new_total)})")

    def cancel(self, order: dict[str, Any]) -> None:
        self.user(f"Actually, please cancel {order['order_id']}.")
        self.say(f"To confirm: cancel {order['order_id']} and refund {_money(order['total'])}?")
        self.user("Yes.")
        self.tool(
            "cancel_order",
            {"customer_id": self.customer_id, "order_id": order["order_id"]},
            {"order_id": order["order_id"], "status": "cancelled", "refund": order["total"]},
        )
        self.say(f"{order['order_id']} is cancelled; {_money(order['total'])} will be refunded.")
        order["status"] = "cancelled"
        self.done.append(f"cancelled {order['order_id']}")

    def move(self, order: dict[str, Any]) -> None:
        number = self.rng.randrange(100, 999)
        street = self.rng.choice(_STREETS)
        self.user(f"Please ship {order['order_id']} to {number} {street} instead.")
        self.tool(
            "change_address",
            {"order_id": order["order_id"], "line1": f"{number} {street}"},
            {"order_id": order["order_id"], "ship_to": f"{number} {street}", "updated": True},
        )
        self.say(f"{order['order_id']} will now ship to {number} {street}.")

    def recall(self) -> None:
        """A question about something said long ago, answered from the conversation."""
        shipped = [o for o in self.orders if "shipment" in o]
        choice = self.rng.randrange(3)
        if choice == 0 and shipped:
            order = shipped[0]
            self.user(f"Sorry, what was the tracking number for {order['order_id']} again?")
            shipment = order["shipment"]
            self.say(
                f"It's {shipment['tracking']} with {shipment['carrier']} "
                f"(order placed {order['placed_on']}, {_money(order['total'])})."
            )
        elif choice == 1:
            order = self.orders[0]
            self.user("Which card did I pay my oldest order with?")
            card = next(c for c in self.cards if c["id"] == order.get("payment_id"))
            self.say(
                f"Order {order['order_id']} was paid with the {card['brand']} ending "
                f"{card['last4']} ({card['id']})."
            )
        else:
            order = self.rng.choice(self.orders)
            self.user(f"How much was {order['order_id']} in total?")
            self.say(f"{order['order_id']} came to {_money(order['total'])}.")

    def recap(self) -> None:
        self.user("Can you sum up everything we did today?")
        changes = "; ".join(self.done) or "nothing changed"
        self.say(f"Today, for account {self.customer_id} ({self.email}): {changes}.")
        self.user("Perfect, thanks!")
        self.say("You're welcome, have a great day!")

    def build(self) -> dict[str, Any]:
        self.identify()
        self.list_orders()
        # First the customer looks at every order, then acts on them: an action needs the
        # ids, items and prices read long before.
        for order in self.rng.sample(self.orders, len(self.orders)):
            self.open_order(order)
            if self.rng.random() < 0.3:
                self.recall()
        for order in self.rng.sample(self.orders, len(self.orders)):
            if order["status"] == "delivered":
                self.rng.choice((self.start_return, self.refund))(order)
            elif order["status"] == "processing":
                self.rng.choice((self.move, self.coupon))(order)
            if self.rng.random() < 0.6:
                self.recall()
        new = self.buy()
        self.recall()
        if self.rng.random() < 0.5:
            self.coupon(new)
        else:
            self.cancel(new)
        self.recall()
        self.recap()
        return {
            "id": f"generated_support_{self.index:03d}",
            "messages": self.messages,
            "metadata": {"user_id": self.customer_id, "generator": "benchmarks.traffic"},
        }


def conversation(index: int, seed: int = 0) -> dict[str, Any]:
    """Conversation number ``index`` of ``seed``, in the conversation file format."""
    return _Conversation(index, seed).build()


def conversations(count: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """``count`` conversations of ``seed``."""
    for index in range(count):
        yield conversation(index, seed)


def write_conversations(path: Path, count: int = 40, seed: int = 0) -> Path:
    """Write ``count`` conversations as JSON lines to ``path``; returns ``path``."""
    with path.open("w", encoding="utf-8") as out:
        for item in conversations(count, seed):
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.traffic", description=__doc__)
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    parser.add_argument("--conversations", type=int, default=40, help="how many (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    write_conversations(args.out, args.conversations, args.seed)
    print(f"wrote {args.conversations} conversations to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
