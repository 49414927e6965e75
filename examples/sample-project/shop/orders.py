"""Orders placed against the inventory."""

from dataclasses import dataclass, field

from shop.inventory import Inventory


@dataclass
class Order:
    lines: dict[str, int] = field(default_factory=dict)

    def add_line(self, sku: str, quantity: int) -> None:
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        self.lines[sku] = self.lines.get(sku, 0) + quantity

    def remove_line(self, sku: str, quantity: int) -> None:
        
    def total_cents(self, inventory: Inventory) -> int:
        return sum(inventory.items[sku].price_cents * n for sku, n in self.lines.items())
