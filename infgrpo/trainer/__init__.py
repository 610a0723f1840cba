"""What ``python -m infgrpo.fit`` attaches to a Lightning ``Trainer`` besides callbacks, and the sharding handle
:class:`~infgrpo.GRPOModule` asks: the ``fsdp2`` strategy (:mod:`~infgrpo.trainer.fsdp2`), atomic checkpoint IO
(:mod:`~infgrpo.trainer.checkpoint_io`), FSDP2's gather and reshard (:mod:`~infgrpo.trainer.sharding`) and
:class:`~infgrpo.trainer.policy_sharding.PolicySharding`. Callbacks live in :mod:`infgrpo.callbacks`.

Importing this room registers ``trainer.strategy: fsdp2`` with Lightning, here and only here: the module and the
command line import it for what they use, so ``L.Trainer(strategy="fsdp2")`` works once ``infgrpo.GRPOModule`` or
``infgrpo.FSDP2Strategy`` was reached (``import infgrpo`` alone loads no Lightning).
"""

from lightning.pytorch.strategies import StrategyRegistry

from infgrpo.trainer.fsdp2 import FSDP2Strategy

FSDP2Strategy.register_strategies(StrategyRegistry)
