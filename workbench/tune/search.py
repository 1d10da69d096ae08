"""Search strategies over a finite set of configurations: grid, random and Optuna's TPE.

Each strategy proposes configurations (tile dicts) from ``candidates``, the valid points of a
family's tune grid at one size, and is told the kernel time each one measured (None: it failed
or gave a wrong result). ``ask(n)`` returns up to ``n`` configurations not proposed before, so
a caller can measure a batch at once (every worker of a sweep busy) and ``tell`` them as they
come back; ``[]`` means the candidates are exhausted.

- ``grid``: every candidate, in grid order;
- ``random``: every candidate, in an order shuffled by the seed;
- ``bayes``: Optuna's TPE sampler (``constant_liar``: configurations asked and not yet told count
  as bad, so one batch spreads out), one categorical distribution per tile. A proposal outside
  the valid set is told a penalty at once and never measured; a proposal already measured is
  told its known time; when TPE keeps proposing known points the batch is filled with unseen
  candidates at random (told back to the study as ordinary trials). Optuna is the optional
  ``tune`` extra: without it ``bayes`` is a ValueError with the install line.

The strategies are the same objects ``workbench tune`` drives and
``benchmarks/search_efficiency.py`` replays against stored records.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence

STRATEGIES = ("grid", "random", "bayes")
MISSING_OPTUNA = (
    "--strategy bayes needs Optuna, which is not installed: pip install 'kernel-workbench[tune]' (or 'optuna>=4')"
)
# What an invalid or failed configuration is told: worse than any kernel time (TPE ranks values).
PENALTY = 1e9


def config_key(config: Mapping) -> tuple:
    return tuple(sorted(config.items()))


class Search:
    """Base: a finite candidate list; subclasses decide the order of proposals."""

    name = "?"

    def __init__(self, candidates: Sequence[Mapping], seed: int = 0):
        self.candidates = [dict(c) for c in candidates]
        self.by_key = {config_key(c): c for c in self.candidates}
        self.seed = seed
        self.proposed: set[tuple] = set()
        self.told: dict[tuple, float | None] = {}

    @property
    def exhausted(self) -> bool:
        return len(self.proposed) >= len(self.candidates)

    def ask(self, n: int) -> list[dict]:
        raise NotImplementedError

    def tell(self, config: Mapping, value: float | None) -> None:
        self.told[config_key(config)] = value

    def _take(self, order: Sequence[dict], n: int) -> list[dict]:
        out = []
        for c in order:
            if len(out) >= n:
                break
            key = config_key(c)
            if key not in self.proposed:
                self.proposed.add(key)
                out.append(dict(c))
        return out


class GridSearch(Search):
    name = "grid"

    def ask(self, n):
        return self._take(self.candidates, n)


class RandomSearch(Search):
    name = "random"

    def __init__(self, candidates, seed=0):
        super().__init__(candidates, seed)
        self.order = list(self.candidates)
        random.Random(seed).shuffle(self.order)

    def ask(self, n):
        return self._take(self.order, n)


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise ValueError(MISSING_OPTUNA) from None
    return optuna


class BayesSearch(Search):
    """Optuna TPE over one categorical distribution per tile (module docstring)."""

    name = "bayes"

    def __init__(self, candidates, seed=0):
        super().__init__(candidates, seed)
        optuna = self.optuna = import_optuna()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        names = sorted({k for c in self.candidates for k in c})
        self.distributions = {
            n: optuna.distributions.CategoricalDistribution(sorted({c[n] for c in self.candidates if n in c}, key=str))
            for n in names
        }
        sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True, n_startup_trials=8)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.trials: dict[tuple, int] = {}  # proposed key -> its trial number (None: added when told)
        self.fallback = random.Random(seed + 1)

    def ask(self, n):
        out: list[dict] = []
        tries = 0
        while len(out) < n and not self.exhausted and tries < 20 * n + 50:
            tries += 1
            trial = self.study.ask(self.distributions)
            config = {k: v for k, v in trial.params.items()}
            key = config_key(config)
            if key not in self.by_key:  # a combination the grid does not allow: never measured
                self.study.tell(trial, PENALTY)
            elif key in self.told:
                value = self.told[key]
                self.study.tell(trial, PENALTY if value is None else value)
            elif key in self.proposed:  # asked in this batch or the last and not back yet
                self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            else:
                self.proposed.add(key)
                self.trials[key] = trial.number
                out.append(config)
        if len(out) < n and not self.exhausted:  # TPE keeps proposing known points: fill at random
            unseen = [c for c in self.candidates if config_key(c) not in self.proposed]
            self.fallback.shuffle(unseen)
            out += self._take(unseen, n - len(out))
        return out

    def tell(self, config, value):
        super().tell(config, value)
        key = config_key(config)
        score = PENALTY if value is None else value
        number = self.trials.pop(key, None)
        if number is not None:
            self.study.tell(number, score)
        else:
            trial = self.optuna.trial.create_trial(params=dict(config), distributions=self.distributions, value=score)
            self.study.add_trial(trial)


def make_search(strategy: str, candidates: Sequence[Mapping], seed: int = 0) -> Search:
    """The strategy by name; ValueError names the choices (or how to install Optuna)."""
    kinds = {"grid": GridSearch, "random": RandomSearch, "bayes": BayesSearch}
    if strategy not in kinds:
        raise ValueError(f"--strategy {strategy}: use one of {', '.join(STRATEGIES)}")
    return kinds[strategy](candidates, seed)
