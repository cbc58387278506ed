"""Data: loaders, splits and tf.data builders."""
