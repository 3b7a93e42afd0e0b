"""The strategies a bench run compares: ``warmpool`` (the production logic),
and the two designs it replaces, ``vpc-cni`` and ``cilium`` (models, each
documented next to its code with its assumptions)."""
