"""Scraping a Prometheus endpoint over HTTP, as Prometheus does, for the metrics tests."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "free_port", "scrape"]


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Samples:
    """The samples of one scrape: (name, labels) -> value."""

    values: dict[tuple[str, frozenset[tuple[str, str]]], float]
    families: dict[str, str]  # family name -> type

    def value(self, name: str, **labels: str) -> float | None:
        """The sample of name with exactly these labels (None: absent)."""
        return self.values.get((name, frozenset(labels.items())))

    def total(self, name: str, **labels: str) -> float:
        """The sum of name's samples whose labels include these."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.values.items() if n == name and wanted <= ls)

    def label_values(self, name: str, label: str) -> set[str]:
        return {dict(ls)[label] for (n, ls) in self.values if n == name and label in dict(ls)}


def scrape(port: int, host: str = "127.0.0.1") -> Samples:
    """GET /metrics from host:port and parse the exposition text."""
    response = httpx.get(f"http://{host}:{port}/metrics", timeout=10)
    response.raise_for_status()
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    families: dict[str, str] = {}
    for family in text_string_to_metric_families(response.text):
        families[family.name] = family.type
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Samples(values, families)
