"""Benchmarks of PAW's methods on models built on the spot: model surgery and transfer quality."""
