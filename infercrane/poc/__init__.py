"""``infercrane poc``: one config, one command, one optimization-poc receipt.

``config`` (the PoC config file: model, kernel screen, two serving A/Bs), ``gpus`` (GPU type keys), ``derive`` (the
PoC's sections from the receipts behind them: what ``poc`` writes, ``receipt merge`` joins and ``receipt validate``
derives again), ``serving`` (one A/B section through the serving lab), ``runner`` (preflight, sections in order,
resume, partial receipts).
"""
