"""The self-hosted tunnel: ``vmcp tunnel relay`` (:mod:`.relay`, the public side) and the agent
of ``vmcp proxy tunnel`` (:mod:`.agent`, next to the internal server), one WebSocket between
them carrying many HTTP exchanges as streams of :mod:`vmcp_trio.protocol.tunnel`'s frames
(:mod:`.link` does their I/O); :mod:`.tokens` holds the relay's per-tunnel tokens. The agent
forwards like ``vmcp proxy`` does, with its headers and credentials (:mod:`vmcp_trio.proxy`)."""
