"""``warmpool bench``: scenarios run in virtual time for each strategy, against
one emulated EC2 per strategy, measured against a lower bound."""


def bench_main(argv: list[str]) -> int:
    """``warmpool bench SCENARIO.yaml [--json OUT] [--plot OUT.png]`` (see bench/cli.py)."""
    from bench.cli import bench_main as run

    return run(argv)


__all__ = ["bench_main"]
