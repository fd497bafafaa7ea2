"""The local engine: real Dynamo frontend + mocker processes and real AIPerf on this machine.

Never shipped to Lambda. ``modeldir`` generates the offline tokenizer/model directory, ``processes``
starts and stops processes, ``serving`` implements ``ServingPort`` and ``load`` implements ``LoadPort``.
"""
