"""Layers: stores that wrap another store and change what passes through.

- :mod:`storage.layers.payload`: ``PayloadLayer``, the seam every message and record crosses;
- :mod:`storage.layers.transforming`: ``TransformingChatStorage(inner, transform)`` rewrites
  or drops each message on every write path (saves, ``replace``, ``save_messages_if``,
  checkpoint messages);
- :mod:`storage.layers.scrubbing`: the ``scrub`` layer, a transforming layer running
  ``PIIScrubber``;
- :mod:`storage.layers.summarizing`: ``SummarizingChatStorage``, summarized views of long
  histories over an untouched raw record;
- :mod:`storage.layers.strict`: ``StrictViewChatStorage`` (``strict::``), views in the shape
  strict chat templates accept (one leading system message, alternating roles, every tool
  call answered), the raw record untouched;
- :mod:`storage.layers.encrypting`: ``EncryptingChatStorage``, AES-256-GCM with a data key per
  user kept in a separate keyring (crypto-shredding on ``delete_user``);
- :mod:`storage.layers.mirroring`: ``MirrorChatStorage`` (``mirror::``), every write to the
  primary and to a secondary store (a failure of the secondary marked, never raised, and
  repaired), for a live move to another store.

Every layer subclasses ``storage.protocol.ChatStorageWrapper`` (a forwarder for every
method) and declares, per optional ability, whether it passes, transforms or hides it
(``abilities = Abilities(...)``, :mod:`storage.abilities.declaring`); an ability a layer
hides is hidden from the whole stack (``find_ability``). The layers that change what
messages and records carry (transforming, encrypting) do it at one seam,
:class:`storage.layers.payload.PayloadLayer`.
"""
