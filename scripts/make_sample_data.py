"""Write the small GSM8K-style and MATH-style sample files used by the tests (generated, not copied).

    python scripts/make_sample_data.py            # writes tests/data/samples/{gsm8k,math}_sample.jsonl

Every problem comes from a template filled with numbers from ``random.Random(SEED)``, so the output is
byte-for-byte deterministic. GSM8K style: ``question``/``answer``, a few reasoning lines with
``<<a*b=c>>`` calculator notes, then ``#### N`` (some answers written with thousands commas). MATH
style: ``problem``/``solution``, the solution ends with ``\\boxed{...}`` (integers, ``\\frac{3}{4}``,
negative fractions, nested braces such as ``\\frac{2\\sqrt{3}}{3}``).
"""

from __future__ import annotations

import argparse
import json
import random
from fractions import Fraction
from math import gcd
from pathlib import Path

SEED = 1234
NUM_ROWS = 40
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "samples"

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonah"]
ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books"]


def _money(n: int) -> str:
    return f"{n:,}"


def gsm8k_row(rng: random.Random, i: int) -> dict[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    kind = i % 4
    if kind == 0:
        boxes, per_box, given = rng.randint(3, 9), rng.randint(6, 15), rng.randint(2, 10)
        total = boxes * per_box
        left = total - given
        question = (
            f"{name} buys {boxes} boxes of {item} with {per_box} {item} in each box. "
            f"{name} gives {given} {item} to a friend. How many {item} does {name} have left?"
        )
        answer = (
            f"{name} buys {boxes} * {per_box} = <<{boxes}*{per_box}={total}>>{total} {item}.\n"
            f"After giving some away, {name} has {total} - {given} = <<{total}-{given}={left}>>{left} {item}.\n"
            f"#### {left}"
        )
    elif kind == 1:
        hours, rate, days = rng.randint(2, 8), rng.randint(12, 30), rng.randint(5, 22)
        daily = hours * rate
        total = daily * days
        question = (
            f"{name} works {hours} hours a day and earns ${rate} an hour. "
            f"How many dollars does {name} earn in {days} days?"
        )
        answer = (
            f"Each day {name} earns {hours} * {rate} = <<{hours}*{rate}={daily}>>{daily} dollars.\n"
            f"In {days} days that is {daily} * {days} = <<{daily}*{days}={total}>>{total} dollars.\n"
            f"#### {_money(total)}"
        )
    elif kind == 2:
        price, pct = rng.randint(2, 20) * 20, rng.choice([10, 20, 25, 50])
        off = price * pct // 100  # price is a multiple of 20, so this is exact
        final = price - off
        question = f"A jacket costs ${price}. It is on sale for {pct}% off. What is the sale price in dollars?"
        answer = (
            f"The discount is {price} * {pct} / 100 = <<{price}*{pct}/100={off}>>{off} dollars.\n"
            f"The sale price is {price} - {off} = <<{price}-{off}={final}>>{final} dollars.\n"
            f"#### {final}"
        )
    else:
        a, b, c = rng.randint(10, 60), rng.randint(10, 60), rng.randint(2, 5)
        both = a + b
        total = both * c
        question = (
            f"{name} reads {a} pages on Monday and {b} pages on Tuesday. Over the rest of the week {name} reads "
            f"{c - 1} times as many pages as on those two days together. How many pages does {name} read in total?"
        )
        answer = (
            f"On Monday and Tuesday {name} reads {a} + {b} = <<{a}+{b}={both}>>{both} pages.\n"
            f"The rest of the week is {both} * {c - 1} = <<{both}*{c - 1}={both * (c - 1)}>>{both * (c - 1)} pages.\n"
            f"In total {name} reads {both} + {both * (c - 1)} = <<{both}+{both * (c - 1)}={total}>>{total} pages.\n"
            f"#### {total}"
        )
    return {"question": question, "answer": answer}


def _latex(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def math_row(rng: random.Random, i: int) -> dict[str, str]:
    kind = i % 5
    if kind == 0:
        a, b, c, d = rng.randint(1, 7), rng.randint(2, 9), rng.randint(1, 7), rng.randint(2, 9)
        s = Fraction(a, b) + Fraction(c, d)
        problem = f"Compute $\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{d}}}$. Express your answer as a common fraction."
        solution = (
            f"Over the common denominator ${b * d}$ the sum is "
            f"$\\frac{{{a * d} + {c * b}}}{{{b * d}}} = \\frac{{{a * d + c * b}}}{{{b * d}}}$, "
            f"which simplifies to $\\boxed{{{_latex(s)}}}$."
        )
    elif kind == 1:
        red, blue = rng.randint(2, 8), rng.randint(2, 8)
        p = Fraction(red * (red - 1), (red + blue) * (red + blue - 1))
        problem = (
            f"A bag holds {red} red marbles and {blue} blue marbles. Two marbles are drawn without replacement. "
            "What is the probability that both are red? Express your answer as a common fraction."
        )
        solution = (
            f"The first marble is red with probability $\\frac{{{red}}}{{{red + blue}}}$ and then the second with "
            f"probability $\\frac{{{red - 1}}}{{{red + blue - 1}}}$, so the answer is $\\boxed{{{_latex(p)}}}$."
        )
    elif kind == 2:
        k, m = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7, 10, 11])
        n = k * k * m
        problem = f"Simplify $\\sqrt{{{n}}}$."
        solution = f"Since ${n} = {k * k} \\cdot {m}$, we have $\\sqrt{{{n}}} = \\boxed{{{k}\\sqrt{{{m}}}}}$."
    elif kind == 3:
        m = rng.choice([2, 3, 5, 6, 7])
        a = rng.choice([x for x in range(1, 13) if x % m])
        g = gcd(a, m)
        num, den = a // g, m // g
        coef = "" if num == 1 else str(num)
        answer = f"\\frac{{{coef}\\sqrt{{{m}}}}}{{{den}}}"
        problem = f"Rationalize the denominator: $\\frac{{{a}}}{{\\sqrt{{{m}}}}}$."
        solution = (
            f"Multiply the numerator and the denominator by $\\sqrt{{{m}}}$: "
            f"$\\frac{{{a}}}{{\\sqrt{{{m}}}}} = \\frac{{{a}\\sqrt{{{m}}}}}{{{m}}} = \\boxed{{{answer}}}$."
        )
    else:
        a = rng.choice([x for x in range(-9, 10) if x not in (0, 1)])
        b, c = rng.randint(-20, 20), rng.randint(-20, 20)
        x = Fraction(c - b, a)
        problem = f"Solve for $x$: ${a}x + {b} = {c}$.".replace("+ -", "- ")
        solution = (
            f"Subtracting ${b}$ from both sides gives ${a}x = {c - b}$, "
            f"so $x = \\frac{{{c - b}}}{{{a}}} = \\boxed{{{_latex(x)}}}$."
        )
    return {"problem": problem, "solution": solution}


def write(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="Output folder.")
    args = parser.parse_args()
    rng = random.Random(SEED)
    write(args.out / "gsm8k_sample.jsonl", [gsm8k_row(rng, i) for i in range(NUM_ROWS)])
    write(args.out / "math_sample.jsonl", [math_row(rng, i) for i in range(NUM_ROWS)])
    print(f"wrote {NUM_ROWS} rows each to {args.out}")


if __name__ == "__main__":
    main()
