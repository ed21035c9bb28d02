"""A mabwiser-style front end (``fit / partial_fit / predict``) over any policy of this package."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dp_ts_ucb.policies import BanditPolicy, _check_reward

__all__ = ["MABAdapter"]


class MABAdapter:
    """``MABAdapter(arms, DPTSUCB, horizon=..., alpha=1.0, seed=0)``: arms are any hashable labels.

    ``predict()`` returns the label of the next arm to play (the policy's ``select``); ``partial_fit(decisions,
    rewards)`` feeds back rewards of the predicted arms, in order; ``fit`` starts a fresh policy, then
    ``partial_fit``. The learner stays on-policy: a decision that was not the pending prediction is an error,
    because the privacy accounting covers the policy's own transcript only. Every decision label and reward of a
    ``partial_fit`` call is checked before any is fed back, so a bad one leaves the learner as it was; a decision
    that is not the pending prediction stops the feed there, with that prediction still pending (``fit`` keeps the
    previous policy when it refuses the history). ``contexts`` (mabwiser's argument) must be ``None``: these policies
    are context-free.
    """

    def __init__(self, arms: Sequence[Any], policy_cls: type[BanditPolicy], **params: Any) -> None:
        if not (isinstance(policy_cls, type) and issubclass(policy_cls, BanditPolicy)):
            raise ValueError(f"policy_cls must be a BanditPolicy subclass (e.g. DPTSUCB), got {policy_cls!r}")
        if "n_arms" in params:
            raise ValueError(f"n_arms is len(arms) = {len(arms)}; do not pass it (got n_arms={params['n_arms']!r})")
        self.arms = list(arms)
        try:
            self._index = {a: i for i, a in enumerate(self.arms)}
        except TypeError as e:
            raise ValueError(f"arms must be hashable labels, got {self.arms!r}") from e
        if len(self._index) != len(self.arms):
            raise ValueError(f"arms must be distinct, got {self.arms}")
        self.policy_cls, self.params = policy_cls, params
        self.policy = policy_cls(n_arms=len(self.arms), **params)
        self._queue: list[int] = []

    @staticmethod
    def _no_contexts(contexts: Any) -> None:
        if contexts is not None:
            raise ValueError("contexts must be None: the policies of dp_ts_ucb are context-free bandits")

    def predict(self, contexts: Any = None) -> Any:
        """The next arm's label (the same label until its reward is fed back)."""
        self._no_contexts(contexts)
        if not self._queue:
            self._queue.append(self.policy.select())
        return self.arms[self._queue[0]]

    def partial_fit(self, decisions: Sequence[Any], rewards: Sequence[float], contexts: Any = None) -> MABAdapter:
        """Feed back rewards of predicted arms (each decision must be the pending prediction)."""
        self._no_contexts(contexts)
        if len(decisions) != len(rewards):
            raise ValueError(f"decisions and rewards differ in length: {len(decisions)} vs {len(rewards)}")
        for d in decisions:
            try:
                known = d in self._index
            except TypeError:  # unhashable
                known = False
            if not known:
                raise ValueError(f"unknown arm {d!r}; arms: {self.arms}")
        checked = [_check_reward(r) for r in rewards]
        for d, r in zip(decisions, checked):
            if not self._queue:
                self.predict()
            if self._index[d] != self._queue[0]:
                raise ValueError(f"decision {d!r} is not the pending prediction {self.arms[self._queue[0]]!r}")
            self.policy.update(self._queue[0], r)
            self._queue.pop(0)  # only once the policy has taken the reward
        return self

    def fit(self, decisions: Sequence[Any], rewards: Sequence[float], contexts: Any = None) -> MABAdapter:
        """Start a fresh policy and feed the (on-policy) history."""
        self._no_contexts(contexts)
        old = self.policy, self._queue
        self.policy = self.policy_cls(n_arms=len(self.arms), **self.params)
        self._queue = []
        try:
            return self.partial_fit(decisions, rewards)
        except Exception:
            self.policy, self._queue = old  # a refused history leaves the learner as it was
            raise
