"""Studies built on the methods: the benchmark table (``bench``), the capacity frontier (``frontier``)
and the advice a solve prints (``advice``)."""
