"""A mabwiser-style front end (``fit / partial_fit / predict``) over any policy of this package."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dp_ts_ucb.policies import BanditPolicy

__all__ = ["MABAdapter"]


class MABAdapter:
    """``MABAdapter(arms, DPTSUCB, horizon=..., alpha=1.0, seed=0)``: arms are any hashable labels.

    ``predict()`` returns the label of the next arm to play (the policy's ``select``); ``partial_fit(decisions,
    rewards)`` feeds back rewards of the predicted arms, in order; ``fit`` starts a fresh policy, then
    ``partial_fit``. The learner stays on-policy: a decision that was not the pending prediction is an error,
    because the privacy accounting covers the policy's own transcript only.
    """

    def __init__(self, arms: Sequence[Any], policy_cls: type[BanditPolicy], **params: Any) -> None:
        self.arms = list(arms)
        if len(set(self.arms)) != len(self.arms):
            raise ValueError(f"arms must be distinct, got {self.arms}")
        self.policy_cls, self.params = policy_cls, params
        self._index = {a: i for i, a in enumerate(self.arms)}
        self.policy = policy_cls(n_arms=len(self.arms), **params)
        self._queue: list[int] = []

    def predict(self) -> Any:
        """The next arm's label (the same label until its reward is fed back)."""
        if not self._queue:
            self._queue.append(self.policy.select())
        return self.arms[self._queue[0]]

    def partial_fit(self, decisions: Sequence[Any], rewards: Sequence[float]) -> MABAdapter:
        """Feed back rewards of predicted arms (each decision must be the pending prediction)."""
        if len(decisions) != len(rewards):
            raise ValueError(f"decisions and rewards differ in length: {len(decisions)} vs {len(rewards)}")
        for d, r in zip(decisions, rewards):
            if d not in self._index:
                raise ValueError(f"unknown arm {d!r}; arms: {self.arms}")
            if not self._queue:
                self.predict()
            if self._index[d] != self._queue[0]:
                raise ValueError(f"decision {d!r} is not the pending prediction {self.arms[self._queue[0]]!r}")
            self.policy.update(self._queue.pop(0), float(np.asarray(r)))
        return self

    def fit(self, decisions: Sequence[Any], rewards: Sequence[float]) -> MABAdapter:
        """Start a fresh policy and feed the (on-policy) history."""
        self.policy = self.policy_cls(n_arms=len(self.arms), **self.params)
        self._queue = []
        return self.partial_fit(decisions, rewards)
