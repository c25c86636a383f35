-- Gap-attribution probe: how much of code's decode-rate advantage over prose at one
-- concurrency each factor of their difference explains. Per variant the level value is the
-- median over its counted trials (int_trials' verdict) of each wave's median stream rate
-- (int_stream_rates.decode_tok_s); its samples are the seeded bootstrap every sweep level
-- gets (macros/level_bootstrap.sql), keyed by variant, so intervals are deterministic.
--   gap = code - prose
--   temperature:             (code - code@prose-temperature) / gap
--   output length:           (code - code@prose-length) / gap
--   temperature, prose side: (prose@code-temperature - prose) / gap   (a check from the other side)
--   prompt content: acceptance = 1 - temperature - output length       (what is left)
-- Each figure is computed once by the same expression for the level values and for every
-- bootstrap sample; the interval is the samples' ci_low_pct .. ci_high_pct. A gap whose own
-- interval holds 0 is within noise: its shares are NULL, never a division by about zero.
with waves as (
    select * from {{ ref('int_gap_attribution_trials') }}
),

streams as (
    select
        w.run_id, w.deployment, w.concurrency, w.variant, w.trial, s.decode_tok_s,
        {{ level_key('w.run_id', 'w.deployment', 'w.variant', "'gap-attribution'",
            'w.concurrency') }} as level_key
    from {{ ref('int_stream_rates') }} as s
    inner join waves as w on w.wave_id = s.wave_id
    where w.is_valid and s.decode_tok_s is not null
),

keys as (
    select distinct level_key, run_id, deployment, concurrency, variant
    from streams
),

boot as (
    {{ level_bootstrap('streams') }}
),

variants as (
    -- every variant the probe ran, also one with no counted trial
    select
        run_id, deployment, concurrency, variant,
        count(*) as n_trials,
        count(*) filter (where is_valid) as n_valid_trials,
        median(median_decode_tok_s) filter (where is_valid) as median_decode_tok_s,
        list(median_decode_tok_s order by trial) filter (where is_valid)
            as trial_decode_tok_s,
        median(temperature) as temperature,
        avg(mean_requested_tokens) as mean_requested_tokens
    from waves
    group by run_id, deployment, concurrency, variant
),

variant_values as (
    -- the level values (sample NULL) and every bootstrap sample of each variant
    select run_id, deployment, concurrency, variant, null::integer as sample,
        median_decode_tok_s as decode_tok_s
    from variants
    where n_valid_trials > 0
    union all
    select k.run_id, k.deployment, k.concurrency, k.variant, b.sample,
        b.boot_median_tok_s as decode_tok_s
    from boot as b
    inner join keys as k on k.level_key = b.level_key
),

wide as (
    select
        run_id, deployment, concurrency, sample,
        any_value(decode_tok_s) filter (where variant = 'code') as code_tok_s,
        any_value(decode_tok_s) filter (where variant = 'prose') as prose_tok_s,
        any_value(decode_tok_s) filter (where variant = 'code@prose-temperature')
            as code_at_prose_temperature_tok_s,
        any_value(decode_tok_s) filter (where variant = 'code@prose-length')
            as code_at_prose_length_tok_s,
        any_value(decode_tok_s) filter (where variant = 'prose@code-temperature')
            as prose_at_code_temperature_tok_s
    from variant_values
    group by run_id, deployment, concurrency, sample
),

factors as (
    select * from (values
        (1, 'temperature', 'code@prose-temperature'),
        (2, 'output length', 'code@prose-length'),
        (3, 'temperature, prose side', 'prose@code-temperature'),
        (4, 'prompt content: acceptance', null)
    ) as f (factor_order, factor, variant)
),

figures as (
    -- the one formula of each share, for the level values and each sample alike
    select
        w.run_id, w.deployment, w.concurrency, w.sample, f.factor_order, f.factor, f.variant,
        w.code_tok_s - w.prose_tok_s as gap_tok_s,
        case f.factor
            when 'temperature' then w.code_at_prose_temperature_tok_s
            when 'output length' then w.code_at_prose_length_tok_s
            when 'temperature, prose side' then w.prose_at_code_temperature_tok_s
        end as variant_tok_s,
        case f.factor
            when 'temperature'
                then (w.code_tok_s - w.code_at_prose_temperature_tok_s) / w.gap_nonzero_tok_s
            when 'output length'
                then (w.code_tok_s - w.code_at_prose_length_tok_s) / w.gap_nonzero_tok_s
            when 'temperature, prose side'
                then (w.prose_at_code_temperature_tok_s - w.prose_tok_s) / w.gap_nonzero_tok_s
            when 'prompt content: acceptance'
                then 1
                    - (w.code_tok_s - w.code_at_prose_temperature_tok_s) / w.gap_nonzero_tok_s
                    - (w.code_tok_s - w.code_at_prose_length_tok_s) / w.gap_nonzero_tok_s
        end as share_explained
    from (
        select *, nullif(code_tok_s - prose_tok_s, 0) as gap_nonzero_tok_s from wide
    ) as w
    cross join factors as f
),

gap_interval as (
    select
        run_id, deployment, concurrency,
        {{ bootstrap_interval('gap_tok_s', var('ci_low_pct'), var('ci_high_pct')) }}
    from figures
    where sample is not null and factor_order = 1 and gap_tok_s is not null
    group by run_id, deployment, concurrency
),

-- each factor's variant rate and share explained, the interval over their samples
{%- for interval, figure in [
    ('variant_interval', 'variant_tok_s'), ('share_interval', 'share_explained')
] %}
{{ interval }} as (
    select
        run_id, deployment, concurrency, factor,
        {{ bootstrap_interval(figure, var('ci_low_pct'), var('ci_high_pct')) }}
    from figures
    where sample is not null and {{ figure }} is not null
    group by run_id, deployment, concurrency, factor
),
{% endfor %}

counts as (
    select
        run_id, deployment, concurrency,
        coalesce(max(n_valid_trials) filter (where variant = 'code'), 0)
            as n_valid_trials_code,
        coalesce(max(n_valid_trials) filter (where variant = 'prose'), 0)
            as n_valid_trials_prose,
        coalesce(max(n_valid_trials) filter (where variant = 'code@prose-temperature'), 0)
            as n_valid_trials_code_at_prose_temperature,
        coalesce(max(n_valid_trials) filter (where variant = 'code@prose-length'), 0)
            as n_valid_trials_code_at_prose_length
    from variants
    group by run_id, deployment, concurrency
),

probes as (
    select distinct run_id, deployment, concurrency
    from waves
),

judged as (
    select
        p.run_id,
        p.deployment,
        p.concurrency,
        f.factor_order,
        f.factor,
        f.variant,
        w.code_tok_s as code_decode_tok_s,
        w.prose_tok_s as prose_decode_tok_s,
        w.code_tok_s - w.prose_tok_s as gap_tok_s,
        g.ci_low_tok_s as gap_ci_low_tok_s,
        g.ci_high_tok_s as gap_ci_high_tok_s,
        v.median_decode_tok_s as variant_decode_tok_s,
        vi.ci_low_tok_s as variant_ci_low_tok_s,
        vi.ci_high_tok_s as variant_ci_high_tok_s,
        v.trial_decode_tok_s as variant_trial_decode_tok_s,
        coalesce(v.n_trials, 0) as variant_n_trials,
        coalesce(v.n_valid_trials, 0) as variant_n_valid_trials,
        c.n_valid_trials_code,
        c.n_valid_trials_prose,
        v.temperature as variant_temperature,
        v.mean_requested_tokens as variant_mean_requested_tokens,
        fig.share_explained as share_point,
        si.ci_low_tok_s as share_ci_low_point,
        si.ci_high_tok_s as share_ci_high_point,
        list_filter([
            case when c.n_valid_trials_code = 0 then 'code' end,
            case when c.n_valid_trials_prose = 0 then 'prose' end,
            case when f.variant is not null and coalesce(v.n_valid_trials, 0) = 0
                then f.variant end,
            case when f.variant is null and c.n_valid_trials_code_at_prose_temperature = 0
                then 'code@prose-temperature' end,
            case when f.variant is null and c.n_valid_trials_code_at_prose_length = 0
                then 'code@prose-length' end
        ], lambda x: x is not null) as missing_variants
    from probes as p
    cross join factors as f
    left join counts as c
        on c.run_id = p.run_id and c.deployment = p.deployment
        and c.concurrency = p.concurrency
    left join wide as w
        on w.run_id = p.run_id and w.deployment = p.deployment
        and w.concurrency = p.concurrency and w.sample is null
    left join gap_interval as g
        on g.run_id = p.run_id and g.deployment = p.deployment
        and g.concurrency = p.concurrency
    left join variants as v
        on v.run_id = p.run_id and v.deployment = p.deployment
        and v.concurrency = p.concurrency and v.variant = f.variant
    left join variant_interval as vi
        on vi.run_id = p.run_id and vi.deployment = p.deployment
        and vi.concurrency = p.concurrency and vi.factor = f.factor
    left join figures as fig
        on fig.run_id = p.run_id and fig.deployment = p.deployment
        and fig.concurrency = p.concurrency and fig.factor = f.factor and fig.sample is null
    left join share_interval as si
        on si.run_id = p.run_id and si.deployment = p.deployment
        and si.concurrency = p.concurrency and si.factor = f.factor
),

verdicts as (
    select
        *,
        case
            when len(missing_variants) > 0
                then 'incomplete: no counted trial of '
                    || array_to_string(missing_variants, ', ')
            when gap_ci_low_tok_s <= 0 and gap_ci_high_tok_s >= 0 then 'gap within noise'
            else 'measured'
        end as verdict
    from judged
),

final as (
    select
        * exclude (share_point, share_ci_low_point, share_ci_high_point, missing_variants,
            verdict),
        case when verdict = 'measured' then share_point end as share_explained,
        case when verdict = 'measured' then share_ci_low_point end as share_ci_low,
        case when verdict = 'measured' then share_ci_high_point end as share_ci_high,
        verdict
    from verdicts
)

select * from final
