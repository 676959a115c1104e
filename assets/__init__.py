"""Dagster assets, one package per group: ``raw`` (the topic and its archive), ``views``.

Files stay thin: a decorator and a call into ``pipelines/``; ``orchestration.definitions``
loads each package with its group name from :mod:`assets.constants`.
"""
