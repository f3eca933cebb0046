"""The sentences that judge a chapter's measurements, one module per chapter (`ch1` ... `ch6`); a verdict that
weighs one number against another within a margin does it with `margin.compare`."""
