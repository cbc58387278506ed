"""Data: loaders, splits and tf.data builders (see DESIGN.md, "pipelines/data")."""
