"""Stock levels of a small shop."""

from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    name: str
    price_cents: int
    quantity: int = 0


@dataclass
class Inventory:
    items: dict[str, Item] = field(default_factory=dict)

    def add(self, item: Item) -> None:
        if item.sku in self.items:
            raise ValueError(f"duplicate sku: {item.sku}")
        self.items[item.sku] = item

    def restock(self, sku: str, quantity: int) -> None:
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        item = self.items[sku]
        item.quantity += quantity

    def take(self, sku: str, quantity: int) -> None:
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        item = self.items[sku]
        if item.quantity < quantity:
            raise ValueError(f"only {item.quantity} of {item.sku} left")
        item.quantity -= quantity

    def value_cents(self) -> int:
        return sum(item.price_cents * item.quantity for item in self.items.values())
