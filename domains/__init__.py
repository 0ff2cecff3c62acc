"""Ready-made Forewarn domains: a spec, a simulator or adapter and a trace generator each."""

