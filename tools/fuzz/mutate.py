"""A plain random mutator for when atheris is not installed (``--engine random``): no coverage guidance,
the classic byte-level mutations (flip, set, insert, erase, duplicate, splice, dictionary token)."""

from __future__ import annotations

import random

_INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x40, 0xA1, 0xB1, 0xC1, 0xD1)


class Mutator:
    def __init__(self, rng: random.Random, corpus: list[bytes], tokens: list[bytes], max_len: int):
        self.rng = rng
        self.corpus = [c for c in corpus if c] or [b"\x00"]
        self.tokens = tokens or [b"\x00"]
        self.max_len = max_len

    def mutate(self) -> bytes:
        rng = self.rng
        data = bytearray(rng.choice(self.corpus))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(7)
            n = len(data)
            pos = rng.randrange(n + 1) if n else 0
            if op == 0 and n:
                data[min(pos, n - 1)] ^= 1 << rng.randrange(8)
            elif op == 1 and n:
                data[min(pos, n - 1)] = rng.choice(_INTERESTING)
            elif op == 2:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            elif op == 3 and n:
                del data[pos:pos + rng.randint(1, 16)]
            elif op == 4 and n:
                start = rng.randrange(n)
                data[pos:pos] = data[start:start + rng.randint(1, 32)]
            elif op == 5:
                other = rng.choice(self.corpus)
                cut = rng.randrange(len(other) + 1)
                data = data[:pos] + other[cut:]
            else:
                data[pos:pos] = rng.choice(self.tokens)
        return bytes(data[:self.max_len])
