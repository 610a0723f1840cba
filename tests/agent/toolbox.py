"""Tools and environments the agent tests name by import path (``tests.agent.toolbox:add``)."""

import asyncio
import random
import threading


def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


async def mul(a: int, b: int) -> int:
    """Multiplies two integers, asynchronously.

    Args:
        a: the first factor
        b: the second factor
    """
    await asyncio.sleep(0)
    return a * b


def echo(text: str) -> list:
    """Returns content blocks (a list result is kept as it is).

    Args:
        text: what to echo
    """
    return [{"type": "text", "text": text}]


def broken(x: int) -> int:
    """Always fails.

    Args:
        x: ignored
    """
    raise RuntimeError(f"broken on {x}")


async def broken_async(x: int) -> int:
    """Always fails, asynchronously.

    Args:
        x: ignored
    """
    raise KeyError(x)


def no_hints(a):
    """No type hint.

    Args:
        a: something
    """
    return a


def no_docstring(a: int) -> int:
    return a


def no_args_line(a: int) -> int:
    """A docstring without an Args section."""
    return a


NOT_CALLABLE = 3


class Counter:
    """An environment: a counter the model moves, reset to the row's start; its reward is the final count."""

    def __init__(self):
        self.count = 0
        self.resets = 0

    def reset(self, start: int = 0, **row) -> str:
        """Sets the count to the row's ``start``; the observation names it."""
        self.count = start
        self.resets += 1
        return f" (start at {start})"

    def step(self, by: int) -> int:
        """Moves the counter.

        Args:
            by: how far
        """
        self.count += by
        return self.count

    def peek(self) -> int:
        """The count now."""
        return self.count

    def _private(self) -> None:
        """Not a tool."""

    @property
    def doubled(self) -> int:
        """Not a tool (a property)."""
        return 2 * self.count

    def get_reward(self) -> float:
        """The final count."""
        return float(self.count)


class Quiet(Counter):
    """A Counter whose reset returns nothing and which has no reward of its own... but inherits get_reward."""

    def reset(self, **row) -> None:
        """Nothing to observe."""
        self.count = 0


class Plain:
    """An environment without get_reward, one async tool."""

    def reset(self, **row) -> None:
        """Nothing."""

    async def wait(self, n: int) -> str:
        """Waits.

        Args:
            n: how many
        """
        await asyncio.sleep(0)
        return "waited " * n


class Moody:
    """Each instance observes something else: the samples of a row disagree."""

    made = 0

    def __init__(self):
        Moody.made += 1
        self.me = Moody.made

    def reset(self, number: bool = False, **row) -> str | int:
        """Its own number (as an int when the row asks: not an observation)."""
        return self.me if number else str(self.me)


class NoReset:
    """An environment without reset."""

    def step(self, by: int) -> int:
        """Moves.

        Args:
            by: how far
        """
        return by


class BadMethod:
    """An environment whose tool has no docstring."""

    def reset(self, **row) -> None:
        """Nothing."""

    def move(self, x):
        return x


def make_counter() -> Counter:
    """A factory function (not a class)."""
    return Counter()


def make_no_reset() -> NoReset:
    """A factory function of an environment without reset."""
    return NoReset()


class Calculator:
    """An environment whose method is the calculator task's tool; its reward counts the calls made."""

    def __init__(self):
        self.calls = 0

    def reset(self, **row) -> None:
        """A fresh count."""
        self.calls = 0

    def add(self, a: int, b: int) -> int:
        """Adds two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        self.calls += 1
        return a + b

    def get_reward(self) -> float:
        """The calls made."""
        return float(self.calls)


class Ledger:
    """An environment that logs when it is made and reset (its number, and the row's ``n``) to ``Ledger.log``."""

    log: list = []
    made = 0

    def __init__(self):
        Ledger.made += 1
        self.me = Ledger.made
        Ledger.log.append(("made", self.me))

    def reset(self, n: int = 0, **row) -> None:
        """Logs the reset."""
        if n < 0:
            raise KeyError("n must be >= 0")
        Ledger.log.append(("reset", self.me, n))


class Sized:
    """An environment whose constructor needs an argument (TRL makes environments with none)."""

    def __init__(self, size: int):
        self.size = size

    def reset(self, **row) -> None:
        """Nothing."""


def make_sized(size: int) -> Sized:
    """A factory that needs an argument."""
    return Sized(size)


class Adder:
    """An environment whose method is named as the standalone tool ``add``."""

    def reset(self, **row) -> None:
        """Nothing."""

    def add(self, a: int, b: int) -> int:
        """Adds.

        Args:
            a: one
            b: two
        """
        return a + b


def quit_run(code: int) -> int:
    """Ends the process, as a careless tool might.

    Args:
        code: the exit code
    """
    raise SystemExit(code)


def interrupt(x: int) -> int:
    """Raises KeyboardInterrupt, as a tool that catches Ctrl-C badly might.

    Args:
        x: ignored
    """
    raise KeyboardInterrupt


async def quit_async(code: int) -> int:
    """Ends the process, asynchronously.

    Args:
        code: the exit code
    """
    raise SystemExit(code)


def nothing(x: int) -> None:
    """Prints instead of returning.

    Args:
        x: what it would print
    """


HELD = threading.Event()
"""What :func:`hang` waits on: set by a test once it has seen it time out."""
ENTERED = threading.Event()
"""Set by :func:`hang` when it starts waiting."""


def hang(x: int) -> int:
    """Blocks until the test releases it.

    Args:
        x: returned
    """
    ENTERED.set()
    HELD.wait()
    return x


async def hang_async(x: int) -> int:
    """Awaits forever (an event no one sets).

    Args:
        x: never returned
    """
    await asyncio.Event().wait()
    return x


class Strict:
    """An environment whose reset takes no row columns."""

    def reset(self) -> None:
        """Nothing."""


class Dealt:
    """A game dealt at random: each instance's ``reset`` deals its own sum from one shared stream (``Dealt.rng``: seed
    it again to replay a rollout), from few enough sums that some samples of a row share one (the shipped tool model
    calls its tool on the first and third, not the second); its reward is 1 when the last ``add`` call added the
    dealt operands."""

    rng = random.Random(0)
    SUMS = ((154372, 2854), (822651, 73411), (3727, 51110))

    def reset(self, **row) -> str:
        """Deals a sum; the observation is its question."""
        self.a, self.b = Dealt.rng.choice(Dealt.SUMS)
        self.called = None
        return f"{self.a}+{self.b}?"

    def add(self, a: int, b: int) -> int:
        """Adds two integers.

        Args:
            a: The first number.
            b: The second number.

        Returns:
            The sum a + b.
        """
        self.called = (a, b)
        return a + b

    def get_reward(self) -> float:
        """1 when the last call added the dealt operands."""
        return float(self.called == (self.a, self.b))
