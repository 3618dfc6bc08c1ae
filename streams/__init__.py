"""The shell around the pure coordinator: effects against cluster ports (and, later, the Faust app).

``streams.effects`` holds the synchronous executor and ``MirrorRunner``, the observe -> decide ->
execute -> persist loop for one cluster mirror.
"""
