"""Operations for the inference fleet: shared connection settings, the local stack, the `fleet` CLI."""
