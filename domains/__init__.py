"""Ready-made Forewarn domains: a spec, a simulator or adapter and a trace generator each."""

if __name__ == 'domains':  # a source checkout imported by the pre-0.2 name: be forewarn.domains
    from forewarn._aliases import redirect

    redirect(__name__)
