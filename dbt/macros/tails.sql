{#- The fewest samples that support a latency quantile, written once (MLPerf's early-stopping
    minimum): the smallest n at which n samples with at most one beyond the observed
    q-quantile would still reject "the true q-quantile is higher" at var('tail_confidence'),
    i.e. P(Binomial(n, 1 - q) <= 1) <= 1 - confidence. At 0.99 confidence a p90 needs 64
    samples and a p99 662; fewer is "not enough samples", never a figure. `q` is a literal
    or a constant expression (one scalar subquery over a bounded range: a q up to 0.99999). -#}
{% macro tail_min_samples(q) -%}
    (select cast(min(n) as integer) from range(1, 2000000) as tail_n(n)
     where pow({{ q }}, n) + n * (1 - {{ q }}) * pow({{ q }}, n - 1)
         <= 1 - {{ var('tail_confidence') }})
{%- endmacro %}
