"""``warmpool bench``: scenarios run in virtual time for each strategy, against
one emulated EC2 per strategy, measured against a lower bound."""
