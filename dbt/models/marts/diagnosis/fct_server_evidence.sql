-- What each wave's server said, by meaning (int_wave_server_evidence): one row per wave and
-- evidence, `unavailable` with its reason where the engine has no such metric or no scrape
-- reached it.
with evidence as (
    select * from {{ ref('int_wave_server_evidence') }}
),

-- int_wave_server_evidence's rows, every column as it has them: the mart publishes them
final as (
    select * from evidence
)

select * from final
