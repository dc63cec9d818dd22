def main() -> int:
    raise NotImplementedError  # TODO(cli helper)
