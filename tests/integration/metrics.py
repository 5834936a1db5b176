"""
The daemon's ``/metrics`` text as the tests read it: one sample's value (:func:`metric`).
"""

from __future__ import annotations


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of ``/metrics`` (0 when absent)."""
    want = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{") or line.startswith(f"{name} "):
            found = line[len(name):].split(" ")[0].strip("{}")
            if ",".join(sorted(found.split(","))) == want:
                return float(line.rsplit(" ", 1)[1])
    return 0.0
