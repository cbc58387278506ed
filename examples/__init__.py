"""Examples: keras_logq (Keras 3) with keras-rs."""
