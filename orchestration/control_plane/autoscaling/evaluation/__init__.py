"""What the benchmark measures the policies against, apart from the live autoscaler: the
offline optimum, a perfect forecast and the Pareto marks.

Nothing live imports this package; the benchmarks and their tests do.
"""
