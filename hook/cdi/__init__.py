"""CDI (Container Device Interface): names, spec files, the registry of devices and the edits they make.

One module per concept, as container-device-interface's ``pkg/cdi`` splits the work: ``names`` (fully
qualified device names), ``version`` (which spec version a spec's fields need), ``spec`` (decoding and
checking one spec file), ``speccache`` (the decoded YAML specs the stages keep, by file identity),
``registry`` (the spec directories, priorities and conflicts), ``edits`` (the one place that applies
container edits to a config.json dict). Nothing is imported here, so that a hot-path
module importing ``hook.cdi.names`` pays for that module alone.
"""
