{#
  A replica's room under its capacity line, written once: with code capacity C and prose
  capacity P (both > 0), code streams c and prose streams p are within capacity when
  c / C + p / P <= 1, i.e. when C*P - c*P - p*C >= 0 (integers, no rounding). The room
  divided by P is the code streams it could still take, by C the prose streams.
#}
{% macro plan_line_room(code_cap, prose_cap, code, prose) -%}
    ({{ code_cap }} * {{ prose_cap }} - {{ code }} * {{ prose_cap }} - {{ prose }} * {{ code_cap }})
{%- endmacro %}
