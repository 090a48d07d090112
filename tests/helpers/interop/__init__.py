"""The interoperability matrix: its pinned peers, its cells, and how each cell is judged."""
