"""The mirror runner: observe -> decide (the pure core) -> execute -> persist, for one cluster mirror.

``runner.MirrorRunner`` owns the loop; ``fetch_round`` is the mirror fetchers' round, ``observers``
and ``driver`` the observations and their pipelined calls, ``executor`` the commands, ``syncer``
the metadata syncs, ``data_watch`` the long poll that parks caught-up partitions, ``interest``
the partitions a round must look at, ``backoff`` the idle consumers' fetch backoff and ``destination_check`` the
check that a destination speaks KIP-1279. Imports ``config``, ``tls``, ``state`` and ``kafka``;
never ``admin``, ``worker`` or ``demo``.
"""
