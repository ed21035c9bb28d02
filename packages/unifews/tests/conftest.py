import unifews  # noqa: F401  (imports torch_geometric with its torch.jit deprecation notice silenced)
