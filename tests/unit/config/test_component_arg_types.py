"""A component's hyperparameters reach its dataclass in the declared containers and number types, as its defaults
are: ``tuple[int, ...] | None`` arrived as a list (an unhashable frozen dataclass) and ``dict[str, float]`` as ints."""

from __future__ import annotations

from dataclasses import dataclass, field

from klear_lab.builders import build
from klear_lab.config.compose import compose
from klear_lab.registry import DATA_MIX


def test_values_take_the_declared_types_at_any_depth(registries_restored):
    @DATA_MIX.register("typed_mix_t")
    @dataclass(frozen=True)
    class TypedMix:
        a: tuple[int, ...] = (1, 2)
        b: tuple[int, ...] | None = None
        pair: tuple[float, str] = (0.5, "x")
        w: dict[str, float] = field(default_factory=dict)
        nested: list[tuple[float, ...]] = field(default_factory=list)
        f: float = 1.0

        def __call__(self, pools, ranks, seed):
            return []

    cfg = compose(None, ["data.mix=typed_mix_t", "data.mix.a=[3, 4]", "data.mix.b=[5]", "data.mix.pair=[2, y]",
                         "data.mix.w={x: 1}", "data.mix.nested=[[1, 2]]", "data.mix.f=2"])
    mix = build(DATA_MIX, cfg["data"]["mix"])
    assert (mix.a, mix.b, mix.pair, mix.nested, mix.f) == ((3, 4), (5,), (2.0, "y"), [(1.0, 2.0)], 2.0)
    assert type(mix.pair[0]) is float and type(mix.w["x"]) is float and type(mix.nested[0][0]) is float
    assert build(DATA_MIX, compose(None, ["data.mix=typed_mix_t"])["data"]["mix"]).b is None
